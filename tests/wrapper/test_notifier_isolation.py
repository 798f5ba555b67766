"""However the notifier fails, the exit code is the child's and the logs are complete.

Fifteen distinct ways a command can end, each run with the notification pointed at an SMTP
server that is down (closed port, unresolvable host, a server that never answers, a bad URL).
"""

from __future__ import annotations

import pytest

from tests.support.net import free_port
from tests.wrapper.conftest import PY

FAILURE_MODES = {
    "exit-1": (["sh", "-c", "echo working; exit 1"], 1),
    "exit-3": (["sh", "-c", "exit 3"], 3),
    "exit-255": (["sh", "-c", "exit 255"], 255),
    "sigkill": (["sh", "-c", "echo x; kill -KILL $$"], 137),
    "segfault": ([PY, "-c", "import os,signal; os.kill(os.getpid(), signal.SIGSEGV)"], 139),
    "abort": ([PY, "-c", "import os; os.abort()"], 134),
    "sigterm-self": (["sh", "-c", "kill -TERM $$"], 143),
    "not-found": (["no-such-command-pitstop-test"], 127),
    "not-executable": (["/etc/hostname"], 126),
    "cuda-oom": ([PY, "-c", "import sys; sys.exit('RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB')"], 1),
    "nan-exit-0": ([PY, "-c", "print('step 100 loss is nan')"], 0),
    "traceback": ([PY, "-c", "raise KeyError('batch')"], 1),
    "binary-output": ([PY, "-c", "import os,sys; os.write(1, bytes(range(256))*64); sys.exit(2)"], 2),
    "huge-line": ([PY, "-c", "import os,sys; os.write(2, b'x'*3_000_000); sys.exit(4)"], 4),
    "closed-pipes": (["sh", "-c", "exec >&- 2>&-; exit 5"], 5),
}


def _down_urls(kind: str, blackhole_port: int) -> list[str]:
    return {
        "closed-port": [f"mailto://127.0.0.1:{free_port()}?from=pitstop@localhost&to=ops@localhost"],
        "unresolvable": ["mailto://ops@smtp.pitstop-test.invalid:25?from=pitstop@localhost"],
        "never-answers": [f"mailto://127.0.0.1:{blackhole_port}?from=pitstop@localhost&to=ops@localhost"],
        "bad-url": ["this is :// not a url", "mailto://"],
    }[kind]


DOWN_KINDS = ["closed-port", "unresolvable", "never-answers", "bad-url"]


@pytest.mark.parametrize("mode", list(FAILURE_MODES))
def test_exit_code_unchanged_with_smtp_down(run_pitstop, blackhole_smtp, mode: str) -> None:
    cmd, expected = FAILURE_MODES[mode]
    kind = DOWN_KINDS[list(FAILURE_MODES).index(mode) % len(DOWN_KINDS)]
    opts = [f"--notify={u}" for u in _down_urls(kind, blackhole_smtp)] + ["--notify-success"]
    done = run_pitstop(cmd, opts=opts, env={"PITSTOP_NOTIFY__TIMEOUT_S": "3"})
    assert done.returncode == expected, done.stderr.decode(errors="replace")

    notify = done.json("notify.json")
    assert notify["status"] == "failed", notify
    warnings = [l for l in done.stderr.decode(errors="replace").splitlines() if "notification" in l]
    assert len(warnings) == 1, done.stderr  # one warning line, not a traceback
    own = done.stderr.decode(errors="replace")
    assert "pitstop/wrapper/" not in own and "pitstop/notify.py" not in own  # no wrapper traceback
    if kind == "never-answers":
        assert "timed out after 3s" in notify["summary"]
    # the logs are complete whatever the notifier did
    result = done.json("result.json")
    assert result["exit_code"] == expected
    if mode == "huge-line":
        assert (done.run_dir / "stderr.log").stat().st_size == 3_000_000
    if mode == "binary-output":
        assert (done.run_dir / "stdout.log").read_bytes() == bytes(range(256)) * 64
