"""The run directory: created, with its metadata fsynced, before the child is launched.

Standard library only, and only what the interpreter has already loaded (os, time) plus two C
modules: this runs on every job launch, before the child starts, so pathlib (~10 ms) and json
(which pulls in re, ~5 ms) are left out. Paths here are plain strings.
"""

from __future__ import annotations

import os
import time

from pitstop.procid import identity

METADATA = "metadata.json"
STDOUT_LOG = "stdout.log"
STDERR_LOG = "stderr.log"
COMBINED_LOG = "combined.log"
# The logs the classifier reads, in this order: where both show a cause, the crash usually
# speaks on stderr.
CLASSIFIED_LOGS = (STDERR_LOG, STDOUT_LOG)
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


def resolve_home(environ) -> str:
    """$PITSTOP_HOME, else ~/.pitstop. The TOML file cannot move it: it lives inside it."""
    home = environ.get("PITSTOP_HOME") or os.path.join(os.path.expanduser("~"), ".pitstop")
    return os.path.expanduser(home)


def iso_utc(epoch: float) -> str:
    ms = int(epoch * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{ms:03d}Z"


def new_run_id(epoch: float) -> str:
    """Sortable by start time (to the ms), unique without coordination: 20261202T150405123Z-a1b2c3."""
    ms = int(epoch * 1000) % 1000
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(epoch)) + f"{ms:03d}Z-" + os.urandom(3).hex()


def current_user(environ) -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, ImportError):
        return environ.get("USER") or str(os.getuid())


def fsync_dir(path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_durably(path, obj: dict) -> None:
    """Write-then-rename so a reader never sees half a file; fsync so a crash keeps it.
    For the records written after the child ends (result, verdict, notify)."""
    import json

    data = json.dumps(obj, indent=2, default=str).encode("utf-8") + b"\n"
    path = os.fspath(path)
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp")
    _write_synced(tmp, data, os.O_TRUNC)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def create_run(runs_dir: str, epoch: float, metadata_of) -> tuple[str, str, dict]:
    """A fresh run directory holding metadata.json, both on disk before this returns.

    `metadata_of(run_id)` builds the metadata. The directory is new and private, so the file is
    created in place (O_EXCL) rather than renamed in: one file fsync commits the journal, then the
    run directory and runs/ are fsynced so their new entries survive a crash too (~0.1 ms each).
    """
    run_id, path = _new_dir(runs_dir, epoch)
    metadata = metadata_of(run_id)
    _write_synced(os.path.join(path, METADATA), to_json(metadata).encode("utf-8", "surrogateescape") + b"\n",
                  os.O_EXCL)
    fsync_dir(path)
    fsync_dir(runs_dir)
    return run_id, path, metadata


def _new_dir(runs_dir: str, epoch: float) -> tuple[str, str]:
    """A fresh, empty run directory; the id is retried on the (unlikely) clash."""
    for _ in range(20):
        run_id = new_run_id(epoch)
        path = os.path.join(runs_dir, run_id)
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
        except FileNotFoundError:  # first run under this home: make runs/ and keep its entry
            os.makedirs(runs_dir, exist_ok=True)
            fsync_dir(os.path.dirname(runs_dir))
            continue
        return run_id, path
    raise OSError(f"could not create a unique run directory under {runs_dir}")


def _write_synced(path: str, data: bytes, flag: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | flag, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def to_json(obj) -> str:
    """JSON for the metadata's plain types (dict, list, str, int, float, bool, None) without
    importing json. Strings go through the C encoder json itself uses; non-UTF-8 bytes that came
    in through argv (surrogate escapes) come out as \\udcXX escapes, as json.dumps writes them."""
    if isinstance(obj, str):
        return _quote(obj)
    if obj is None:
        return "null"
    if obj is True:
        return "true"
    if obj is False:
        return "false"
    if isinstance(obj, int):
        return int.__repr__(obj)
    if isinstance(obj, float):
        return float.__repr__(obj) if obj == obj and obj not in (float("inf"), float("-inf")) else "null"
    if isinstance(obj, dict):
        return "{" + ", ".join(f"{_quote(str(k))}: {to_json(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, (list, tuple)):
        return "[" + ", ".join(to_json(v) for v in obj) + "]"
    return _quote(str(obj))


try:
    from _json import encode_basestring_ascii as _quote
except ImportError:  # an interpreter without the C accelerator: json's own pure-Python one
    from json.encoder import py_encode_basestring_ascii as _quote


def build_metadata(
    run_id: str, command: list[str], name: str | None, epoch: float, environ
) -> dict:
    slurm = {k: environ[k] for k in SLURM_VARS if k in environ}
    me = identity()  # pid + start time + boot id: `pitstop runs` tells a killed wrapper from a live one
    return {
        "id": run_id,
        "name": name,
        "command": command,
        "cwd": _cwd(environ),
        "host": os.uname().nodename,
        "user": current_user(environ),
        "wrapper_pid": me["pid"],
        "wrapper_start_ticks": me["start_ticks"],
        "boot_id": me["boot_id"],
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
