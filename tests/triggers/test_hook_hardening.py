"""The hooks against hostile or broken surroundings: ids from the environment that are not ids,
a spool that cannot be written, pending/ entries that are not events.

Real `pitstop epilog` processes with a fake `scontrol` that records its argv.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pitstop.events import hooks
from pitstop.events.models import JobEnded
from pitstop.events.spool import Spool
from pitstop.ids import escape_controls, is_valid
from tests.triggers.conftest import PITSTOP_BIN, closed_port_url, read_env_fixture

LINE_START = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00 pid=\d+ ")


@pytest.fixture
def fake_scontrol(tmp_path: Path) -> tuple[Path, Path]:
    """A `scontrol` that appends its argv to a file and prints a successful job."""
    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    calls = tmp_path / "scontrol-argv.txt"
    script = bin_dir / "scontrol"
    script.write_text(f"#!{sys.executable}\nimport sys\nopen({str(calls)!r}, 'a').write(repr(sys.argv[1:]) + '\\n')\n"
                      "print('JobId=1 JobState=COMPLETING Reason=None ExitCode=0:0')\n")
    script.chmod(0o755)
    return bin_dir, calls


def _epilog(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(PITSTOP_BIN), "epilog"], env=env, capture_output=True, timeout=60)


def _hook_lines(home: Path) -> list[str]:
    return (home / "log" / "hooks.log").read_text(encoding="utf-8").splitlines()


def test_job_id_from_the_environment_never_reaches_scontrol_unvalidated(
        hook_env_base: dict, isolated_home: Path, fake_scontrol) -> None:
    bin_dir, calls = fake_scontrol
    success = {**read_env_fixture("epilog_ctld_success_2nodes.env"), **hook_env_base,
               "PITSTOP_SLURM__BIN_DIR": str(bin_dir), "PREFECT_API_URL": closed_port_url()}
    assert _epilog({**success, "SLURM_JOB_ID": "4242"}).returncode == 0
    assert calls.read_text().splitlines() == ["['-o', 'show', 'job', '4242']"]  # the check is live

    for bad in ("--help", "1234\n", "12;reboot", "-1"):
        assert _epilog({**success, "SLURM_JOB_ID": bad}).returncode == 0
    assert calls.read_text().splitlines() == ["['-o', 'show', 'job', '4242']"]  # never again
    assert Spool(isolated_home / "spool").pending_paths() == []  # and no event for a bogus id
    log = "\n".join(_hook_lines(isolated_home))
    assert "SLURM_JOB_ID='--help' is not a Slurm job id" in log
    assert "SLURM_JOB_ID='1234\\\\n' is not a Slurm job id" in log


def test_a_newline_in_an_id_cannot_forge_a_hooks_log_line(hook_env_base: dict, isolated_home: Path) -> None:
    env = {**read_env_fixture("epilog_ctld_exit3.env"), **hook_env_base, "PREFECT_API_URL": closed_port_url(),
           "SLURM_JOB_ID": "77\n2099-01-01T00:00:00.000+00:00 pid=1 epilog job=1 state=COMPLETED: forged",
           "SLURM_JOB_USER": "eve\nforged-user-line", "SLURM_CLUSTER_NAME": "c\r\x1b[2Jx"}
    assert _epilog(env).returncode == 0
    valid_env = {**env, "SLURM_JOB_ID": "78"}
    assert _epilog(valid_env).returncode == 0
    lines = _hook_lines(isolated_home)
    assert lines and all(LINE_START.match(line) for line in lines), lines
    assert not any("forged" in line and "\\n" not in line for line in lines)
    assert any("ignored SLURM_JOB_USER='eve\\\\nforged-user-line'" in line for line in lines)
    [item] = list(Spool(isolated_home / "spool").iter_pending())  # job 78's event, cleaned
    assert item.event.payload["job_id"] == "78" and item.event.payload["user"] is None
    assert item.event.payload["cluster"] == "default"  # the configured name, not the odd one


def test_id_patterns_agree_with_the_scheduler_adapters() -> None:
    from pitstop.cluster.base import InvalidIdentifier, validate_job_id, validate_node_name

    samples = ["1234", "1234_7", "12+1", "1234\n", "--help", "gpu01", "gpu01\n", "a.b-c_d", "-x", "", "x" * 200]
    for value in samples:
        for kind, validate in (("job id", validate_job_id), ("node name", validate_node_name)):
            try:
                validate(value)
                scheduler_ok = True
            except InvalidIdentifier:
                scheduler_ok = False
            assert is_valid(kind, value) == scheduler_ok, (kind, value)


def test_escape_controls_keeps_one_line() -> None:
    assert escape_controls("a\nb\rc\x00d\x1b\u2028e\\") == "a\\nb\\rc\\x00d\\x1b\\u2028e\\\\"
    assert escape_controls("plain text: gpu01 ü") == "plain text: gpu01 ü"


def _unwritable_home(home: Path) -> None:
    # Root writes through chmod; a regular file where the spool directory should be refuses
    # every write just as a read-only mount does.
    home.mkdir(parents=True, exist_ok=True)
    (home / "spool").write_text("not a directory\n")


def test_unwritable_spool_falls_back_and_says_so(hook_env_base: dict, isolated_home: Path, tmp_path: Path) -> None:
    runtime = tmp_path / "xdg"
    runtime.mkdir(mode=0o700)
    _unwritable_home(isolated_home)
    env = {**read_env_fixture("epilog_ctld_exit3.env"), **hook_env_base, "PREFECT_API_URL": closed_port_url(),
           "XDG_RUNTIME_DIR": str(runtime)}
    assert _epilog(env).returncode == 0
    [item] = list(Spool(runtime / "pitstop" / "spool").iter_pending())
    assert item.event.payload["job_id"] == "8"
    [line] = _hook_lines(isolated_home)
    assert "spool unwritable" in line and "spooled to FALLBACK" in line and str(runtime) in line
    # `spool list` shows it; `spool flush` looks there too
    listed = subprocess.run([str(PITSTOP_BIN), "spool", "list"], env=env, capture_output=True, text=True, timeout=60)
    assert "FALLBACK (PITSTOP_HOME was unwritable) 1 pending" in listed.stdout, listed.stdout + listed.stderr
    flushed = subprocess.run([str(PITSTOP_BIN), "spool", "flush", "--json"], env=env, capture_output=True,
                             text=True, timeout=60)
    assert '"pending": 1' in flushed.stdout and flushed.returncode == 1  # Prefect is down: kept


def test_a_fallback_root_others_can_write_is_not_trusted(tmp_path: Path) -> None:
    from pitstop.events.fallback import candidate_roots, private_dir

    runtime = tmp_path / "xdg"
    runtime.mkdir()
    planted = runtime / "pitstop"
    env = {"XDG_RUNTIME_DIR": str(runtime)}
    assert candidate_roots(env)[0] == planted and candidate_roots(env)[-1].name == f"pitstop-{os.getuid()}"
    assert private_dir(planted, create=True)  # made 0700 by us: fine
    planted.chmod(0o777)  # someone else could write here (or replace our events): skipped
    assert not private_dir(planted, create=True)
    planted.rmdir()
    planted.symlink_to(tmp_path)  # a link planted in a shared directory: skipped
    assert not private_dir(planted, create=True)


def test_no_spool_at_all_delivers_directly_or_logs_the_whole_event(
        monkeypatch: pytest.MonkeyPatch, isolated_home: Path, warm_prefect) -> None:
    from pitstop.config import Settings

    _unwritable_home(isolated_home)
    monkeypatch.setattr(hooks, "usable_roots", lambda create: [])
    event = JobEnded(cluster="c", job_id="9", state="FAILED", exit_code=1).to_wire()

    down = Settings(triggers={"prefect_api_url": closed_port_url()})
    message = hooks.spool_and_deliver(event, down)
    assert message.startswith("NO SPOOL WRITABLE") and "EVENT NOT SPOOLED AND NOT DELIVERED" in message
    assert event.model_dump_json() in message  # an operator can still send it by hand

    up = Settings(triggers={"prefect_api_url": warm_prefect.api_url, "deliver_timeout_s": 5})
    message = hooks.spool_and_deliver(event, up)
    assert f"delivered {event.id} directly" in message, message


def test_hooks_log_falls_back_when_home_is_unwritable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "log").write_text("a file where the log directory should be\n")
    runtime = tmp_path / "xdg"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    hooks.hook_log(home, "epilog job=1: spooled")
    [line] = (runtime / "pitstop" / "log" / "hooks.log").read_text().splitlines()
    assert line.endswith("epilog job=1: spooled")


def test_spool_list_counts_only_event_files(hook_env_base: dict, isolated_home: Path) -> None:
    spool = Spool(isolated_home / "spool")
    spool.write(JobEnded(cluster="c", job_id="5", state="FAILED").to_wire())
    (spool.pending / "x.json").mkdir()
    (spool.pending / "gone.json").symlink_to(spool.pending / "nowhere.json")
    assert spool.counts()["pending"] == len(spool.pending_paths()) == 1
    assert [p.name for p in spool.strays()] == ["gone.json", "x.json"]
    listed = subprocess.run([str(PITSTOP_BIN), "spool", "list"], env={**os.environ, **hook_env_base},
                            capture_output=True, text=True, timeout=60)
    assert "1 pending," in listed.stdout
    assert "x.json (directory;" in listed.stdout and "gone.json (dangling symlink;" in listed.stdout


def test_prolog_ids_from_the_environment_are_checked() -> None:
    from pitstop.events.hook_env import prolog_facts

    notes: list[str] = []
    facts = prolog_facts({"SLURMD_NODENAME": "gpu01\nfake", "SLURM_JOB_ID": "--help", "SLURM_JOB_USER": "a?b=c",
                          "SLURM_CLUSTER_NAME": "ok-cluster"}, notes)
    assert facts["node"] is None and facts["job_id"] is None and facts["user"] is None
    assert facts["cluster"] == "ok-cluster"
    assert [n.split("=")[0] for n in notes] == ["ignored SLURMD_NODENAME", "ignored SLURM_JOB_ID", "ignored SLURM_JOB_USER"]
