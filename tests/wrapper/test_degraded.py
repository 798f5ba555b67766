"""A broken database or an unwritable home never costs the run or its exit code."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.wrapper.conftest import PITSTOP


def test_corrupt_database_keeps_run_and_exit_code(run_pitstop, isolated_home: Path) -> None:
    isolated_home.mkdir(parents=True)
    (isolated_home / "pitstop.db").write_bytes(b"this is not an sqlite database" * 100)
    done = run_pitstop(["sh", "-c", "echo out; exit 4"])
    assert done.returncode == 4
    warnings = [l for l in done.stderr.decode().splitlines() if "could not record the run in the database" in l]
    assert warnings, done.stderr
    assert (done.run_dir / "stdout.log").read_bytes() == b"out\n"
    assert done.json("result.json")["exit_code"] == 4
    # `pitstop runs show` still answers, from the run directory
    show = subprocess.run([PITSTOP, "runs", "show", done.run_dir.name], capture_output=True, text=True)
    assert show.returncode == 0, show.stderr
    assert "cannot read the database" in show.stderr
    assert "Exit code:  4" in show.stdout


def test_unwritable_home_still_runs_the_command(run_pitstop, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    done = run_pitstop(["sh", "-c", "echo still ran; exit 9"], env={"PITSTOP_HOME": str(blocker / "home")})
    assert done.returncode == 9
    assert done.stdout == b"still ran\n"
    assert b"WITHOUT Pitstop logs" in done.stderr


def test_bad_settings_file_degrades_to_defaults(run_pitstop, isolated_home: Path) -> None:
    isolated_home.mkdir(parents=True)
    (isolated_home / "config.toml").write_text('mode = "yolo"\n')
    done = run_pitstop(["sh", "-c", "exit 2"])
    assert done.returncode == 2
    assert b"invalid Pitstop settings" in done.stderr and b"using default settings" in done.stderr
    assert done.json("result.json")["exit_code"] == 2


def test_runs_lists_and_shows(run_pitstop) -> None:
    first = run_pitstop(["true"], opts=["--name", "warmup"])
    second = run_pitstop(["python3", "-c", "import sys; sys.exit('RuntimeError: CUDA out of memory.')"])
    env = {**os.environ, "COLUMNS": "250"}
    listing = subprocess.run([PITSTOP, "runs"], capture_output=True, text=True, env=env)
    assert listing.returncode == 0, listing.stderr
    assert listing.stdout.index(second.run_dir.name) < listing.stdout.index(first.run_dir.name)
    assert "succeeded" in listing.stdout and "failed" in listing.stdout and "cuda_oom" in listing.stdout
    show = subprocess.run([PITSTOP, "runs", "show", second.run_dir.name[:-2]], capture_output=True, text=True, env=env)
    assert show.returncode == 0, show.stderr
    assert "Cause:      cuda_oom" in show.stdout
    assert "stderr.log:1: RuntimeError: CUDA out of memory." in show.stdout
    assert str(second.run_dir) in show.stdout
    missing = subprocess.run([PITSTOP, "runs", "show", "nope"], capture_output=True, text=True)
    assert missing.returncode == 1 and "no run with id 'nope'" in missing.stderr
