"""`kill -9` of the wrapper: `pitstop runs` says "wrapper killed" instead of "running" forever,
and `pitstop runs show` classifies the logs the run left and records it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from pitstop import procid
from pitstop.wrapper.settle import abandoned, wrapper_alive
from tests.wrapper.conftest import PITSTOP, PY, wait_for_run_dir, wait_for_text

OOM_THEN_HANG = """
import os, sys, time
print("child pid", os.getpid(), flush=True)
print("step 1 loss 0.5", flush=True)
print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", file=sys.stderr, flush=True)
print("ready", flush=True)
time.sleep(120)
"""


def _runs(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PITSTOP, "runs", *args], env=env, capture_output=True, text=True, timeout=120)


def test_killed_wrapper_is_shown_as_such_and_its_logs_are_classified(isolated_home: Path) -> None:
    env = {**os.environ, "PITSTOP_HOME": str(isolated_home)}
    wrapper = subprocess.Popen([PITSTOP, "run", "--", PY, "-c", OOM_THEN_HANG], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    run_dir = wait_for_run_dir(isolated_home)
    try:
        wait_for_text(run_dir / "stdout.log", b"ready")
        wait_for_text(run_dir / "stderr.log", b"CUDA out of memory")
        listed = json.loads(_runs(env, "--json").stdout)
        assert [r["status"] for r in listed] in (["running"], ["running?"])  # alive: left alone (row or dir)
        assert wrapper_alive(run_dir) is True
        os.kill(wrapper.pid, signal.SIGKILL)
        wrapper.wait(10)
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
        for line in (run_dir / "stdout.log").read_text().splitlines():
            if line.startswith("child pid "):  # the child has its own process group: it lives on
                os.kill(int(line.split()[2]), signal.SIGKILL)
    assert wrapper_alive(run_dir) is False and abandoned(run_dir, "running")

    table = _runs(env)
    assert "wrapper killed" in table.stdout and "running" not in table.stdout, table.stdout
    shown = _runs(env, "show", run_dir.name)
    assert shown.returncode == 0, shown.stderr
    assert "Status:     wrapper killed" in shown.stdout
    assert "Cause:      cuda_oom" in shown.stdout and "was killed before the command ended" in shown.stdout
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "wrapper_killed" and result["cause"] == "cuda_oom" and result["exit_code"] is None
    [row] = json.loads(_runs(env, "--json").stdout)
    assert row["status"] == "wrapper_killed" and row["cause"] == "cuda_oom"  # recorded, not just shown


def test_a_reused_pid_does_not_make_a_dead_wrapper_look_alive(tmp_path: Path) -> None:
    me = procid.identity()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    meta = {"id": "r1", "host": os.uname().nodename, "wrapper_pid": me["pid"], "boot_id": me["boot_id"],
            "wrapper_start_ticks": me["start_ticks"]}
    (run_dir / "metadata.json").write_text(json.dumps(meta))
    assert wrapper_alive(run_dir) is True
    (run_dir / "metadata.json").write_text(json.dumps({**meta, "wrapper_start_ticks": me["start_ticks"] - 1}))
    assert wrapper_alive(run_dir) is False  # same pid, another process
    (run_dir / "metadata.json").write_text(json.dumps({**meta, "boot_id": "another-boot"}))
    assert wrapper_alive(run_dir) is False  # the machine rebooted since
    (run_dir / "metadata.json").write_text(json.dumps({**meta, "host": "some-other-node"}))
    assert wrapper_alive(run_dir) is None and not abandoned(run_dir, "running")  # cannot tell from here
