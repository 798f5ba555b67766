"""The run directory: created, with its metadata fsynced, before the child is launched.

Standard library only: this runs on every job launch, before the child starts.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

METADATA = "metadata.json"
STDOUT_LOG = "stdout.log"
STDERR_LOG = "stderr.log"
COMBINED_LOG = "combined.log"
RESULT = "result.json"
VERDICT = "verdict.json"
NOTIFY = "notify.json"
ERROR = "error.txt"
ATTACH_DIR = "attach"

# Environment variables worth keeping with a run: they tie it to a Slurm job and step.
SLURM_VARS = (
    "SLURM_JOB_ID",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_STEP_ID",
    "SLURM_PROCID",
    "SLURM_JOB_NAME",
    "SLURM_JOB_PARTITION",
    "SLURM_JOB_NODELIST",
    "SLURM_CLUSTER_NAME",
)


def resolve_home(environ: os._Environ | dict) -> Path:
    """$PITSTOP_HOME, else ~/.pitstop. The TOML file cannot move it: it lives inside it."""
    home = environ.get("PITSTOP_HOME") or os.path.join(os.path.expanduser("~"), ".pitstop")
    return Path(home).expanduser()


def iso_utc(epoch: float) -> str:
    ms = int(epoch * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{ms:03d}Z"


def new_run_id(epoch: float) -> str:
    """Sortable by start time (to the ms), unique without coordination: 20261202T150405123Z-a1b2c3."""
    ms = int(epoch * 1000) % 1000
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(epoch)) + f"{ms:03d}Z-" + os.urandom(3).hex()


def current_user(environ: os._Environ | dict) -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, ImportError):
        return environ.get("USER") or str(os.getuid())


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_durably(path: Path, obj: dict) -> None:
    """Write-then-rename so a reader never sees half a file; fsync so a crash keeps it."""
    data = json.dumps(obj, indent=2, default=str).encode("utf-8") + b"\n"
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def create_run_dir(runs_dir: Path, epoch: float) -> tuple[str, Path]:
    """A fresh, empty run directory; the id is retried on the (unlikely) clash."""
    new = not runs_dir.is_dir()
    runs_dir.mkdir(parents=True, exist_ok=True)
    if new:
        fsync_dir(runs_dir.parent)
    for _ in range(20):
        run_id = new_run_id(epoch)
        path = runs_dir / run_id
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return run_id, path
    raise OSError(f"could not create a unique run directory under {runs_dir}")


def build_metadata(
    run_id: str, command: list[str], name: str | None, epoch: float, environ
) -> dict:
    slurm = {k: environ[k] for k in SLURM_VARS if k in environ}
    return {
        "id": run_id,
        "name": name,
        "command": command,
        "cwd": _cwd(environ),
        "host": os.uname().nodename,
        "user": current_user(environ),
        "wrapper_pid": os.getpid(),
        "started_at": iso_utc(epoch),
        "started_epoch": epoch,
        "slurm_job_id": environ.get("SLURM_JOB_ID"),
        "slurm": slurm,
    }


def _cwd(environ) -> str:
    try:
        return os.getcwd()
    except OSError:  # the directory was deleted under us; say so rather than crash
        return environ.get("PWD", "") + " (deleted)"
