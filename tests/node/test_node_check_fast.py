"""`pitstop node-check` skips typer (it runs on every node of every sweep): same bytes out, same
exit codes, and typer's own answer for anything the fast path does not parse."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pitstop.cli.node_check_fast import Options, parse
from tests.conftest import REPO_ROOT
from tests.node.test_infiniband import make_port

FAST = "from pitstop.cli.entry import main; main(['node-check', *{args!r}])"
TYPER = "from pitstop.cli.app import build_app; build_app()(args=['node-check', *{args!r}], prog_name='pitstop')"
# what the fast path must not load
PROBE = "; import sys; sys.stderr.write('\\nLOADED ' + ' '.join(m for m in ('typer', 'click', 'rich') if m in sys.modules))"


def _run(template: str, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    code = f"try:\n    {template.format(args=args)}\nexcept SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n"
    code += PROBE.lstrip("; ") + "\nraise SystemExit(code)\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT,
                          env={**os.environ, **env}, timeout=60, check=False)


def _same(text: str) -> str:
    """Output with the check time blanked (the two runs are a second apart at most)."""
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", "T", text.split("\nLOADED")[0])


@pytest.fixture()
def node_env(tmp_path: Path) -> dict[str, str]:
    make_port(tmp_path / "ib", "mlx5_0", 1, counters={"link_downed": 3})  # a WARN: exit 1
    return {"PITSTOP_NODE_CHECK__IB_SYSFS_ROOT": str(tmp_path / "ib"), "SLURMD_NODENAME": "gpu07",
            "PITSTOP_NODE_CHECK__DCGMI_PATH": str(tmp_path / "no-dcgmi"), "COLUMNS": "200"}


@pytest.mark.parametrize("args", [
    ["--json", "--checks", "ib"],
    ["--checks=ib,dcgm", "--json"],
    ["--json", "--checks", "ib", "--dcgm-level", "2"],
    ["--checks", "ib"],  # the human table
    ["--checks", "nvml,gpu-magic"],  # usage error, exit 3
])
def test_fast_path_prints_what_typer_prints(args: list[str], node_env: dict[str, str]) -> None:
    fast, slow = _run(FAST, args, node_env), _run(TYPER, args, node_env)
    assert (fast.returncode, _same(fast.stdout), _same(fast.stderr)) == \
           (slow.returncode, _same(slow.stdout), _same(slow.stderr))
    assert fast.returncode in (1, 3)
    loaded = fast.stderr.rsplit("LOADED", 1)[1].split()
    assert "typer" not in loaded and "click" not in loaded
    assert "typer" in slow.stderr.rsplit("LOADED", 1)[1]  # the probe sees imports


@pytest.mark.parametrize("args", [
    ["--help"], ["--dcgm-level", "7"], ["--dcgm-level=x"], ["--json", "--json"], ["--checks"],
    ["--checks", "--json"], ["--bogus"], ["extra"],
])
def test_anything_unusual_goes_to_typer(args: list[str], node_env: dict[str, str]) -> None:
    assert parse(args) is None
    proc = _run(FAST, args, node_env)  # typer answers, as before this fast path existed
    assert "typer" in proc.stderr.rsplit("LOADED", 1)[1]


def test_plain_spellings_parse() -> None:
    assert parse([]) == Options()
    assert parse(["--json", "--checks=ib,disk", "--dcgm-level", "3"]) == Options(True, "ib,disk", 3)
    assert parse(["--checks", "xid", "--dcgm-level=1"]) == Options(False, "xid", 1)
