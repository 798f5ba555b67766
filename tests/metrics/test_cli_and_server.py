"""`pitstop metrics` as a real process, the /metrics server's start/stop, and the settings."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from pitstop.config import ConfigError, load_settings
from pitstop.metrics.exporter import MetricsServer
from tests.metrics.conftest import parse, value
from tests.support.net import free_port
from tests.triggers.conftest import PITSTOP_BIN, closed_port_url

# What PyTorch prints when the caching allocator gives up (torch/csrc/cuda/CUDACachingAllocator.cpp)
CUDA_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
            "capacity of 79.10 GiB of which 1.19 GiB is free.")


def _env(home: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PITSTOP_HOME": str(home), "PREFECT_API_URL": closed_port_url(), **extra}


def _metrics(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(PITSTOP_BIN), "metrics", *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def home_with_a_run(tmp_path_factory) -> Path:
    """A PITSTOP_HOME where `pitstop run` classified one failed command."""
    home = tmp_path_factory.mktemp("metrics-cli") / "home"
    code = f"import sys; print({CUDA_OOM!r}, file=sys.stderr); sys.exit(1)"
    done = subprocess.run([str(PITSTOP_BIN), "run", "--", sys.executable, "-c", code], env=_env(home),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "cuda_oom" in done.stderr, done.stderr
    return home


def test_pitstop_metrics_prints_the_exposition_and_says_what_is_down(home_with_a_run: Path) -> None:
    done = _metrics(_env(home_with_a_run))
    assert done.returncode == 1  # Prefect is down (a closed port): said, and the rest still printed
    assert "prefect is down" in done.stderr and "unreachable" in done.stderr
    m = parse(done.stdout)
    assert value(m, "pitstop_classifier_verdicts", source="run", cause="cuda_oom") == 1
    assert value(m, "pitstop_source_up", source="store") == 1
    assert value(m, "pitstop_source_up", source="prefect") == 0


def test_pitstop_metrics_output_file_is_written_whole(home_with_a_run: Path, tmp_path: Path) -> None:
    target = tmp_path / "textfile" / "pitstop.prom"
    target.parent.mkdir()
    done = _metrics(_env(home_with_a_run), "--output", str(target))
    assert done.returncode == 1 and done.stdout == ""
    assert value(parse(target.read_text()), "pitstop_classifier_verdicts", source="run", cause="cuda_oom") == 1
    assert [p.name for p in target.parent.iterdir()] == ["pitstop.prom"]  # no temporary file left
    done = _metrics(_env(home_with_a_run), "--output", str(tmp_path / "missing-dir" / "x.prom"))
    assert done.returncode == 2 and "cannot write" in done.stderr


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian package prometheus) is not installed")
def test_exposition_passes_promtool_lint(home_with_a_run: Path) -> None:
    text = _metrics(_env(home_with_a_run)).stdout
    lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0 and not lint.stdout.strip(), lint.stdout + lint.stderr


def test_server_serves_and_stop_frees_the_port(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    monkeypatch.setenv("PITSTOP_METRICS__PORT", str(port))
    messages: list[str] = []
    server = MetricsServer(load_settings(), closed_port_url(), on_message=messages.append)
    assert server.start(), messages
    try:
        assert server.url == f"http://127.0.0.1:{port}/metrics"
        with urllib.request.urlopen(server.url, timeout=30) as response:
            m = parse(response.read())
        assert value(m, "pitstop_source_up", source="store") == 1
        assert any("prefect is down" in msg for msg in messages)  # said on stderr of `pitstop up`
    finally:
        stopping = time.monotonic()
        server.stop()
        assert time.monotonic() - stopping < 3  # `pitstop up`'s shutdown is not held up by /metrics
    again = MetricsServer(load_settings(), None, on_message=messages.append)
    assert again.start(), messages[-1]  # stopped means the port is free: a restarted `up` gets it back
    again.stop()


def test_a_busy_port_is_said_and_up_runs_on(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        monkeypatch.setenv("PITSTOP_METRICS__PORT", str(busy.getsockname()[1]))
        messages: list[str] = []
        server = MetricsServer(load_settings(), None, on_message=messages.append)
        assert server.start() is False
        server.stop()
    assert "cannot listen on 127.0.0.1" in messages[0] and "PITSTOP_METRICS__PORT" in messages[0]


def test_metrics_can_be_switched_off(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PITSTOP_METRICS__ENABLED", "false")
    messages: list[str] = []
    assert MetricsServer(load_settings(), None, on_message=messages.append).start() is False
    assert messages == ["metrics: off (metrics.enabled = false)"]


def test_metrics_port_must_not_be_the_prefect_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PITSTOP_METRICS__PORT", "4200")
    with pytest.raises(ConfigError, match=r"metrics.port \(4200\) is the Prefect server's port"):
        load_settings()
    monkeypatch.setenv("PITSTOP_METRICS__ENABLED", "false")
    assert load_settings().metrics.port == 4200  # off: no clash
