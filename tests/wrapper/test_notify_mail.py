"""A real SMTP receiver gets the mail; its subject and body say what an operator needs."""

from __future__ import annotations

from pathlib import Path

from tests.wrapper.conftest import PY

OOM_SCRIPT = """
import sys
for step in range(5):
    print(f"step {step} loss 2.{step}", flush=True)
print("Traceback (most recent call last):", file=sys.stderr)
print("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)", file=sys.stderr)
sys.exit(1)
"""


def _body(msg) -> str:
    part = msg.get_body(preferencelist=("plain",))
    return part.get_content()


def _attachment_names(msg) -> list[str]:
    return [p.get_filename() for p in msg.iter_attachments()]


def test_failure_mail_has_cause_evidence_exit_code_and_skipped(run_pitstop, smtp, tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "out").mkdir(parents=True)
    (work / "out" / "metrics.json").write_text('{"loss": 2.4}\n')
    (work / "out" / "model.ckpt").write_bytes(b"\0" * (2 * 1024 * 1024))
    script = work / "train.py"
    script.write_text(OOM_SCRIPT)
    done = run_pitstop(
        [PY, "train.py"],
        opts=["--notify", smtp.url, "--attach", "out/*", "--attach", "nothing-*.log", "--name", "llama-7b"],
        env={"PITSTOP_WRAPPER__ATTACH_MAX_FILE_BYTES": str(1024 * 1024)},
        cwd=work,
    )
    assert done.returncode == 1, done.stderr
    [msg] = smtp.wait(1)
    subject = msg["Subject"]
    assert "FAILED" in subject and "cuda_oom" in subject and "train.py" in subject, subject
    body = _body(msg)
    assert "Exit code: 1" in body
    assert "cuda_oom" in body
    # the evidence line, with where it is: stderr.log line 2
    assert "stderr.log:2: RuntimeError: CUDA out of memory" in body, body
    # the last lines of stderr
    assert "  | RuntimeError: CUDA out of memory" in body
    assert str(done.run_dir) in body
    # attachments: what fit is attached, what did not is listed with its size
    assert sorted(_attachment_names(msg)) == ["combined.log", "metrics.json"]
    assert "model.ckpt (2.0 MiB): larger than the per-file limit (1.0 MiB)" in body
    assert "--attach nothing-*.log: no files matched" in body
    # the same list is in the run record
    skipped = done.json("result.json")["attachments_skipped"]
    assert [s["name"] for s in skipped] == ["out/model.ckpt"]
    assert skipped[0]["size"] == 2 * 1024 * 1024
    assert done.json("notify.json")["status"] == "sent"


def test_nan_with_exit_0_is_still_reported(run_pitstop, smtp) -> None:
    done = run_pitstop([PY, "-c", "print('step 10 loss: 1.2'); print('step 11 loss is nan')"],
                       opts=["--notify", smtp.url])
    assert done.returncode == 0
    [msg] = smtp.wait(1)
    assert "numerical" in msg["Subject"] and "(exit 0)" in msg["Subject"]
    assert "stdout.log:2: step 11 loss is nan" in _body(msg)
    assert done.json("result.json")["status"] == "failed"


def test_segfault_is_a_crash_signal(run_pitstop, smtp) -> None:
    done = run_pitstop([PY, "-c", "import os,signal; os.kill(os.getpid(), signal.SIGSEGV)"],
                       opts=["--notify", smtp.url])
    assert done.returncode == 139
    [msg] = smtp.wait(1)
    assert "crash_signal" in msg["Subject"]
    assert "139 (killed by SIGSEGV)" in _body(msg)


def test_success_is_quiet_unless_asked(run_pitstop, smtp) -> None:
    quiet = run_pitstop(["echo", "all good"], opts=["--notify", smtp.url])
    assert quiet.returncode == 0 and quiet.stderr == b""
    loud = run_pitstop(["echo", "all good"], opts=["--notify", smtp.url, "--notify-success"])
    assert loud.returncode == 0
    [msg] = smtp.wait(1)
    assert "SUCCEEDED" in msg["Subject"]


def test_large_log_is_attached_as_head_and_tail(run_pitstop, smtp) -> None:
    script = "import sys\nfor i in range(200000): print(f'line {i}')\nsys.exit('fatal: bad things')"
    done = run_pitstop([PY, "-c", script], opts=["--notify", smtp.url],
                       env={"PITSTOP_WRAPPER__LOG_EXCERPT_BYTES": "8192"})
    assert done.returncode == 1
    [msg] = smtp.wait(1)
    [att] = list(msg.iter_attachments())
    assert att.get_filename() == "combined.excerpt.log"
    text = att.get_content() if isinstance(att.get_content(), str) else att.get_content().decode()
    assert "O| line 0\n" in text and "E| fatal: bad things" in text
    assert "left out here; the full log is" in text
    assert len(text) < 9000
    body = _body(msg)
    assert "combined.log is" in body and "attached its head and tail" in body
    assert (done.run_dir / "combined.log").stat().st_size > 1_000_000  # the full log stays on disk
