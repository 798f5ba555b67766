"""Output reaches the terminal unchanged and the logs exactly; combined.log tags every line."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from pitstop.wrapper.pump import CombinedLog, CombinedWriter, Sink
from tests.wrapper.conftest import PY

LINE_RE = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z [OE][|+] ")


def test_terminal_and_logs_get_identical_bytes(run_pitstop) -> None:
    # invalid UTF-8, NUL, CR, a lone surrogate's bytes, ANSI colour, no final newline
    payload = b"ok\n\xff\xfe\x00bin\r\nhalf\xed\xa0\x80\x1b[31mred\x1b[0m\nno newline at end"
    script = f"import os; os.write(1, {payload!r}); os.write(2, {payload[::-1]!r})"
    done = run_pitstop([PY, "-c", script])
    assert done.returncode == 0
    assert done.stdout == payload
    assert done.stderr == payload[::-1]
    assert (done.run_dir / "stdout.log").read_bytes() == payload
    assert (done.run_dir / "stderr.log").read_bytes() == payload[::-1]
    combined = (done.run_dir / "combined.log").read_bytes().split(b"\n")[:-1]
    assert all(LINE_RE.match(line) for line in combined), combined
    out_lines = [LINE_RE.sub(b"", l) for l in combined if b" O" in l[:30]]
    assert out_lines[0] == b"ok" and out_lines[1] == b"\xff\xfe\x00bin\r"
    assert out_lines[-1] == b"no newline at end"


def test_all_256_byte_values(run_pitstop) -> None:
    blob = bytes(range(256)) * 4096
    done = run_pitstop([PY, "-c", f"import os,sys; sys.stdout.buffer.write(bytes(range(256))*4096)"])
    assert done.returncode == 0
    assert done.stdout == blob
    assert (done.run_dir / "stdout.log").read_bytes() == blob


def _pump_to_files(tmp_path: Path, chunks: list[bytes], line_cap: int = 64) -> bytes:
    comb = os.open(tmp_path / "comb", os.O_WRONLY | os.O_CREAT)
    log = CombinedLog(Sink(comb, "combined.log"), line_cap=line_cap)
    for chunk in chunks:
        log.add(b"E" if chunk.startswith(b"ERR") else b"O", chunk, time.time())
    log.close()
    os.close(comb)
    return (tmp_path / "comb").read_bytes()


def test_combined_writer_thread_keeps_read_order(tmp_path: Path) -> None:
    # The pump hands chunks to the combined.log thread: order and line tags must survive the queue.
    comb = os.open(tmp_path / "comb", os.O_WRONLY | os.O_CREAT)
    writer = CombinedWriter(CombinedLog(Sink(comb, "combined.log")))
    writer.start()
    for i in range(2000):
        writer.add(b"E" if i % 3 == 0 else b"O", b"line %d\n" % i, time.time())
    writer.add(b"O", b"unfinished", time.time())
    writer.end_line_of(b"O")
    writer.finish()
    os.close(comb)
    lines = _strip((tmp_path / "comb").read_bytes())
    assert lines[:2000] == [(b"E| " if i % 3 == 0 else b"O| ") + b"line %d" % i for i in range(2000)]
    assert lines[2000:] == [b"O| unfinished"]
    assert writer.error is None


def _strip(combined: bytes) -> list[bytes]:
    return [line[25:] for line in combined.split(b"\n")[:-1]]


def test_lines_split_across_chunks_are_joined(tmp_path: Path) -> None:
    lines = _strip(_pump_to_files(tmp_path, [b"alp", b"ha\nbe", b"ta\ngam", b"ma\n"]))
    assert lines == [b"O| alpha", b"O| beta", b"O| gamma"]


def test_overlong_line_is_split_and_marked(tmp_path: Path) -> None:
    lines = _strip(_pump_to_files(tmp_path, [b"x" * 100, b"y" * 10 + b"\nnext\n"], line_cap=64))
    assert lines == [b"O| " + b"x" * 100, b"O+ " + b"y" * 10, b"O| next"]
    assert max(len(l) for l in lines) < 64 + 100 + 8  # bounded by cap + one chunk


def test_other_stream_interrupting_a_line(tmp_path: Path) -> None:
    lines = _strip(_pump_to_files(tmp_path, [b"loading", b"ERR warning\n", b"... done\n"]))
    assert lines == [b"O| loading", b"E| ERR warning", b"O+ ... done"]


def test_many_lines_in_one_chunk(tmp_path: Path) -> None:
    chunk = b"".join(b"%d\n" % i for i in range(10000))
    lines = _strip(_pump_to_files(tmp_path, [chunk]))
    assert lines == [b"O| %d" % i for i in range(10000)]


def test_closed_terminal_does_not_stop_the_logs(run_pitstop, tmp_path: Path) -> None:
    # `pitstop run -- cmd | head -1`: the terminal pipe closes early; the log must stay complete
    home = os.environ["PITSTOP_HOME"]
    script = "for i in range(100000): print(i)"
    import subprocess

    out = subprocess.run(
        f"{PY.rsplit('/', 1)[0]}/pitstop run -- {PY} -c '{script}' | head -1",
        shell=True, capture_output=True, timeout=60,
    )
    assert out.stdout == b"0\n"
    runs = sorted(Path(home, "runs").iterdir())
    log = (runs[-1] / "stdout.log").read_bytes()
    assert log == b"".join(b"%d\n" % i for i in range(100000))
