"""UTF-16 and UTF-32 logs (byte-order mark first) are decoded and classified like UTF-8 ones,
with the same line numbers; everything else is scanned exactly as before."""

from __future__ import annotations

import codecs
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from classifiers import RULES, _engine, classify_files
from classifiers.scan import scan_stream
from classifiers.transcode import RAW_CHUNK, utf8_view
from pitstop.models import Cause

XID_LINE = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
ENCODINGS = [("utf-16-le", codecs.BOM_UTF16_LE), ("utf-16-be", codecs.BOM_UTF16_BE),
             ("utf-32-le", codecs.BOM_UTF32_LE), ("utf-32-be", codecs.BOM_UTF32_BE)]


def _log(n_before: int) -> str:
    return "".join(f"step {i} loss 0.{i % 97:02d} ünïcode\n" for i in range(n_before)) + XID_LINE + "\nbye\n"


@pytest.mark.parametrize(("codec", "bom"), ENCODINGS)
def test_bom_marked_log_is_decoded_and_classified(tmp_path: Path, codec: str, bom: bytes) -> None:
    path = tmp_path / f"job-{codec}.log"
    path.write_bytes(bom + _log(1000).encode(codec))
    verdict = classify_files([path])
    assert verdict.cause is Cause.GPU_HARDWARE and verdict.signature == "xid-79"
    [evidence] = [e for e in verdict.evidence if "Xid" in e.text]
    assert evidence.line == 1001 and evidence.text == XID_LINE


def test_large_utf16_log_is_decoded_in_chunks_and_finds_a_fault_deep_inside(tmp_path: Path) -> None:
    # several decode chunks and scan windows, and a fault past all of them
    body = _log(0).replace(XID_LINE + "\n", "")
    filler = "x" * 200 + "\n"
    lines_before = (3 * RAW_CHUNK) // (2 * len(filler)) + 1
    path = tmp_path / "big-utf16.log"
    with open(path, "wb") as out:
        out.write(codecs.BOM_UTF16_LE)
        chunk = (filler * 4096).encode("utf-16-le")
        for _ in range(lines_before // 4096):
            out.write(chunk)
        out.write((filler * (lines_before % 4096)).encode("utf-16-le"))
        out.write((XID_LINE + "\n" + body).encode("utf-16-le"))
    verdict = classify_files([path])
    assert verdict.signature == "xid-79"
    assert next(e for e in verdict.evidence if "Xid" in e.text).line == lines_before + 1


def test_utf16_from_a_pipe_and_a_utf8_pipe_keep_their_first_bytes() -> None:
    engine = _engine()
    # the Xid line comes first: the bytes read to look for a BOM must not go missing
    for data in (codecs.BOM_UTF16_LE + _log(0).encode("utf-16-le"), _log(0).encode("utf-8")):
        read_fd, write_fd = os.pipe()
        writer = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())"],
                                  stdin=subprocess.PIPE, stdout=write_fd)
        os.close(write_fd)
        writer.stdin.write(data)
        writer.stdin.close()
        with open(read_fd, "rb", buffering=0) as pipe:
            hits = scan_stream(pipe, engine, RULES, "pipe")
        writer.wait(10)
        assert {(h.line, h.text) for h in hits if "Xid" in h.text} == {(1, XID_LINE)}


def test_plain_files_are_left_alone() -> None:
    plain = io.BytesIO(b"hello\n")
    assert utf8_view(plain) is plain and plain.tell() == 0
    ascii_log = io.BytesIO(b"abc\n")
    ascii_log.seek(1)
    assert utf8_view(ascii_log) is ascii_log and ascii_log.read() == b"bc\n"
