"""Corrupt, huge, binary, empty and missing inputs give a verdict or a clear error, never a crash."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from classifiers import ClassifyError, classify_files, classify_text, hint_for
from classifiers.scan import MAX_CARRY_BYTES
from pitstop.models import GUESS_SIGNATURE_PREFIX, Cause

XID = b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
REPO = Path(__file__).resolve().parents[2]


def test_empty_text_and_file(tmp_path: Path) -> None:
    assert classify_text("").cause is Cause.UNKNOWN
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert classify_files([empty]).cause is Cause.UNKNOWN


def test_binary_junk_and_non_utf8(tmp_path: Path) -> None:
    junk = random.Random(1).randbytes(3 * 1024 * 1024)
    path = tmp_path / "junk.bin"
    path.write_bytes(junk + b"\n\xff\xfe CUDA out of memory \xc3\x28 tried\x00\n" + junk)
    verdict = classify_files([path])
    assert verdict.cause is Cause.CUDA_OOM
    assert "\x00" not in verdict.evidence[0].text and "CUDA out of memory" in verdict.evidence[0].text


def test_single_huge_line_is_classified_and_evidence_truncated(tmp_path: Path) -> None:
    path = tmp_path / "one-line.log"
    with open(path, "wb") as out:
        out.write(b"x" * (30 * 1024 * 1024) + b" loss is nan " + b"y" * (30 * 1024 * 1024))
    verdict = classify_files([path])
    assert verdict.cause is Cause.NUMERICAL
    assert verdict.evidence[0].line == 1 and len(verdict.evidence[0].text) <= 500


def test_a_corrupt_run_of_digits_is_no_xid() -> None:
    # NVIDIA's Xids have at most three digits; a torn line's digit run (past Python's 4,300-digit
    # int() limit too) is neither an Xid event nor a crash, and an unlisted Xid keeps its number.
    for digits in ("9" * 200, "9" * 5000):
        verdict = classify_text(f"NVRM: Xid (PCI:0000:3b:00): {digits}, pid=1, name=python\n", learned=False)
        assert verdict.cause is Cause.UNKNOWN and not verdict.signature.startswith("xid")
        # The learned model may lean on the driver's words, as a guess that nothing acts on.
        leaning = classify_text(f"NVRM: Xid (PCI:0000:3b:00): {digits}, pid=1, name=python\n")
        assert leaning.cause is Cause.UNKNOWN or leaning.signature.startswith(GUESS_SIGNATURE_PREFIX)
    unlisted = classify_text("NVRM: Xid (PCI:0000:3b:00): 997, pid=1, name=python\n")
    assert unlisted.cause is Cause.GPU_HARDWARE and unlisted.signature == "xid-997"
    assert "Xid catalog" in hint_for(unlisted.signature)


def test_match_straddling_a_window_cut_in_a_long_line_is_found(tmp_path: Path) -> None:
    from classifiers import RULES, _engine
    from classifiers.scan import scan_stream

    data = b"a" * (MAX_CARRY_BYTES + 5000) + b"No space left on device" + b"b" * 100
    path = tmp_path / "cut.log"
    path.write_bytes(data)
    for window in (MAX_CARRY_BYTES + 5010, 4096 * 3):
        with open(path, "rb") as stream:
            hits = scan_stream(stream, _engine(), RULES, "log", window_bytes=window)
        assert any(h.signature == "no-space-left" for h in hits), window


def test_line_numbers_across_windows(tmp_path: Path) -> None:
    from classifiers import RULES, _engine
    from classifiers.scan import scan_stream

    lines = [b"step %d loss 1.0\n" % i for i in range(20000)]
    lines[12345] = b"OSError: [Errno 28] No space left on device\n"
    path = tmp_path / "lines.log"
    path.write_bytes(b"".join(lines))
    with open(path, "rb") as stream:
        hits = scan_stream(stream, _engine(), RULES, "log", window_bytes=4096)
    assert [h.line for h in hits if h.signature == "no-space-left"] == [12346]


def test_missing_directory_and_unreadable_paths_raise_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ClassifyError, match="no such file"):
        classify_files([tmp_path / "nope.log"])
    with pytest.raises(ClassifyError, match="directory"):
        classify_files([tmp_path])
    locked = tmp_path / "locked.log"
    locked.write_text("x")
    locked.chmod(0)
    if os.access(locked, os.R_OK):
        pytest.skip("running as root: permissions are not enforced")
    with pytest.raises(ClassifyError, match="permission denied"):
        classify_files([locked])


def test_odd_file_names(tmp_path: Path) -> None:
    path = tmp_path / "job 42 ☃ --json;rm -rf.log"
    path.write_bytes(XID)
    assert classify_files([path]).cause is Cause.GPU_HARDWARE


def test_stdout_and_stderr_combine_into_one_verdict(tmp_path: Path) -> None:
    out, err = tmp_path / "out.log", tmp_path / "err.log"
    out.write_text("epoch 1 loss 2.0\n" * 3 + WATCHDOG_LINE)
    err.write_bytes(b"warming up\n" + XID)
    verdict = classify_files([out, err])
    assert verdict.cause is Cause.GPU_HARDWARE
    assert verdict.evidence[0].source == str(err) and verdict.evidence[0].line == 2


WATCHDOG_LINE = "[E ProcessGroupNCCL.cpp:828] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)\n"


@pytest.mark.slow
def test_big_log_fault_at_the_very_start_memory_bounded(tmp_path: Path) -> None:
    """A 150 MB log: the Xid on line 1 decides it, and the classifier's peak RSS stays small."""
    path = tmp_path / "big.log"
    block = b"".join(b"[INFO] iteration %8d | lm loss: 2.345E+00 | grad norm: 0.812 | tokens/s 123456\n" % i for i in range(50000))
    with open(path, "wb") as out:
        out.write(XID)
        written = 0
        while written < 150 * 1024 * 1024:
            out.write(block)
            written += len(block)
        out.write(WATCHDOG_LINE.encode())
    code = (
        "import json, sys; from classifiers import classify_files; "
        "v = classify_files([sys.argv[1]]); "
        "print(json.dumps({'cause': v.cause.value, 'line': v.evidence[0].line, "
        "'rss_mb': [int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')][0] / 1024}))"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=REPO, check=True)
    import json

    result = json.loads(proc.stdout)
    assert result["cause"] == "gpu_hardware" and result["line"] == 1
    assert result["rss_mb"] < 200, result


def test_corrupt_hyperscan_cache_falls_back_to_compiling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("hyperscan")
    from classifiers import RULES
    from classifiers.engines import HyperscanEngine, _db_cache_path

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    expressions = [r.pattern.encode() for r in RULES]
    first = HyperscanEngine(RULES)  # compiles and writes the cache
    import hyperscan

    flags = [hyperscan.HS_FLAG_SINGLEMATCH | hyperscan.HS_FLAG_MULTILINE | (hyperscan.HS_FLAG_CASELESS if r.caseless else 0) for r in RULES]
    cache = _db_cache_path(expressions, flags)
    assert cache.exists() and cache.parent == tmp_path / "pitstop"
    cache.write_bytes(b"\x00garbage" * 10)
    engine = HyperscanEngine(RULES)
    window = XID + b"loss nan\n"
    assert engine.first_matches(window) == first.first_matches(window) != {}


def test_hyperscan_cache_keeps_the_recently_used_databases_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every rule edit compiles new databases; without eviction ~/.cache/pitstop grows for ever."""
    pytest.importorskip("hyperscan")
    import os

    from classifiers import RULES
    from classifiers.engines import CACHE_KEEP, HyperscanEngine

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    root = tmp_path / "pitstop"
    root.mkdir()
    for n in range(CACHE_KEEP + 10):  # databases of older rule tables, oldest first
        old = root / f"hyperscan-old{n:03d}.db"
        old.write_bytes(b"x")
        os.utime(old, (1_000_000 + n, 1_000_000 + n))
    HyperscanEngine(RULES)  # compiles the current table and stores it
    left = {p.name for p in root.glob("hyperscan-*")}
    assert len(left) == CACHE_KEEP
    assert "hyperscan-old057.db" in left and "hyperscan-old000.db" not in left
    assert any(not name.startswith("hyperscan-old") for name in left)  # the new one stays
    again = HyperscanEngine(RULES)  # loads from cache: nothing new to store, nothing evicted
    assert {p.name for p in root.glob("hyperscan-*")} == left
    assert again.first_matches(XID) != {}
