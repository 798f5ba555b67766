"""The scanner's speed-ups must never change an answer.

Pruning (skipping rules that can no longer change the verdict), the scan thread pool, buffer
reuse, weak-rule skipping and the last-occurrence look-up are each checked against the plain
path: every rule over every window, one thread.
"""

from __future__ import annotations

import io
import random
import subprocess
import sys
from pathlib import Path

import pytest

from pitstop.models import SchedulerFacts

from classifiers import RULES, _engine
from classifiers.decide import candidates_from, decide
from classifiers.engines import ENGINE_NAMES, LAST_MIN_PRIORITY
from classifiers.scan import scan_stream
from classifiers.scheduler_facts import fact_hits
from tests.classifiers.cases import CASES

FACTS = [
    None,
    SchedulerFacts(state="TIMEOUT"),
    SchedulerFacts(state="COMPLETED", exit_code=0),
    SchedulerFacts(exit_code=0),
    SchedulerFacts(state="OUT_OF_MEMORY"),
    SchedulerFacts(state="FAILED", signal=9),
    SchedulerFacts(state="NODE_FAIL"),
]


def _verdict(data: bytes, facts=None, **scan_kw):
    hits = scan_stream(io.BytesIO(data), _engine(), RULES, "log", **scan_kw)
    return decide(candidates_from([hits], RULES, fact_hits(facts)))


def _mixed_log(seed: int, lines: int = 400) -> bytes:
    """Progress lines with a random handful of real fault lines from the case table mixed in."""
    rng = random.Random(seed)
    out = [f"iteration {i} | lm loss: 2.{i:04d} | grad norm: 0.5 | [INFO] step {i}" for i in range(lines)]
    for text, _cause, _sig in rng.sample(CASES, 6):
        for line in text.splitlines():
            out.insert(rng.randrange(len(out) + 1), line)
    return ("\n".join(out) + "\n").encode()


@pytest.mark.parametrize("seed", range(12))
def test_pruned_scan_reaches_the_same_verdict_as_the_full_scan(seed: int) -> None:
    data = _mixed_log(seed)
    for facts in FACTS:
        # Small windows: pruning only starts after the first window.
        full = _verdict(data, facts, window_bytes=2048, prune=False, threads=1)
        pruned = _verdict(data, facts, window_bytes=2048, prune=True, threads=2)
        assert pruned == full, (seed, facts)


def test_pruning_keeps_every_case_verdict_when_the_case_comes_late() -> None:
    """Each case line after a strong early fault and many windows of noise: same verdict."""
    noise = b"".join(b"[INFO] iteration %d | loss 1.0\n" % i for i in range(300))
    for early, _c, _s in CASES[:: max(len(CASES) // 6, 1)]:
        for text, _cause, _sig in CASES:
            data = early.encode() + b"\n" + noise + text.encode() + b"\n" + noise
            full = _verdict(data, window_bytes=4096, prune=False, threads=1)
            assert _verdict(data, window_bytes=4096, threads=1) == full, (early, text)


def test_threads_and_window_sizes_give_identical_hits(tmp_path: Path) -> None:
    data = _mixed_log(99, lines=20000)
    path = tmp_path / "mixed.log"
    path.write_bytes(data)
    reference = None
    for threads in (1, 2, 3):
        for window in (4096, 65536, 1 << 20):
            with open(path, "rb", buffering=0) as stream:
                hits = scan_stream(stream, _engine(), RULES, str(path), window_bytes=window, threads=threads, prune=False)
            reference = reference or hits
            assert hits == reference, (threads, window)


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_engines_agree_on_first_and_last_matches_with_skips(engine: str) -> None:
    window = _mixed_log(5, lines=300)
    reference = _engine("re")
    eng = _engine(engine)
    skip = frozenset(i for i, rule in enumerate(RULES) if rule.priority < LAST_MIN_PRIORITY)

    def line_of(offset: int) -> int:
        return window.count(b"\n", 0, offset)

    for skipped in (frozenset(), skip):
        got = {i: line_of(o) for i, o in eng.first_matches(window, skipped).items()}
        want = {i: line_of(o) for i, o in reference.first_matches(window, skipped).items()}
        assert got == want and not (set(got) & skipped)
    strong = frozenset(i for i in got if RULES[i].priority >= LAST_MIN_PRIORITY)
    assert strong, "the mixed log should hit some strong rules"
    lasts = {i: line_of(o) for i, o in eng.last_matches(strong, window, len(window)).items()}
    assert lasts == {i: line_of(o) for i, o in reference.last_matches(strong, window, len(window)).items()}
    assert set(lasts) == strong


def test_weak_rule_is_not_rescanned_but_strong_last_occurrence_is_kept() -> None:
    body = [b"step %d loss 1.0" % i for i in range(5000)]
    body[3] = body[4000] = b"OSError: [Errno 28] No space left on device"
    data = b"\n".join(body) + b"\n"
    hits = scan_stream(io.BytesIO(data), _engine(), RULES, "log", window_bytes=4096)
    by_sig = {h.signature: h for h in hits}
    assert by_sig["training-progress"].line == 1 and by_sig["training-progress"].last_line is None
    assert (by_sig["no-space-left"].line, by_sig["no-space-left"].last_line) == (4, 4001)


def test_pipe_with_short_reads_gives_the_same_hits_as_the_file(tmp_path: Path) -> None:
    """A real pipe (cat | classifier) delivers the file in small reads; windows still line up."""
    data = _mixed_log(3, lines=30000)
    path = tmp_path / "piped.log"
    path.write_bytes(data)
    with open(path, "rb", buffering=0) as stream:
        from_file = scan_stream(stream, _engine(), RULES, "log", window_bytes=65536)
    cat = subprocess.Popen(["cat", str(path)], stdout=subprocess.PIPE)
    try:
        from_pipe = scan_stream(cat.stdout, _engine(), RULES, "log", window_bytes=65536)
    finally:
        cat.stdout.close()
        cat.wait()
    assert from_pipe == from_file


class _ReadOnly:
    """A stream with read() but no readinto(), returning odd-sized chunks."""

    def __init__(self, data: bytes) -> None:
        self._data, self._at = data, 0

    def read(self, size: int = -1) -> bytes:
        size = min(size, 777)
        chunk = self._data[self._at : self._at + size]
        self._at += len(chunk)
        return chunk


def test_stream_without_readinto_works() -> None:
    data = _mixed_log(8, lines=3000)
    plain = scan_stream(io.BytesIO(data), _engine(), RULES, "log", window_bytes=8192)
    assert scan_stream(_ReadOnly(data), _engine(), RULES, "log", window_bytes=8192) == plain


@pytest.mark.slow
def test_classify_cli_on_a_large_log_is_quick_and_small(tmp_path: Path) -> None:
    """200 MB through the real CLI: right answer, bounded memory (the speed figure is in bench/)."""
    path = tmp_path / "big.log"
    block = b"".join(b"[2025-03-04 10:00:00,000] [INFO] [rank3] iteration %8d | lm loss: 2.345E+00 | "
                     b"grad norm: 0.812 | tokens/s 123456\n" % i for i in range(40000))
    with open(path, "wb") as out:
        out.write(b"[Tue Mar  4 10:00:01 2025] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus.\n")
        for _ in range(200 * 1024 * 1024 // len(block)):
            out.write(block)
        out.write(b"OSError: [Errno 28] No space left on device\n")
    code = (
        "import json, sys; from classifiers import classify_files; "
        "v = classify_files([sys.argv[1]]); "
        "print(json.dumps({'sig': v.signature, 'lines': [e.line for e in v.evidence], "
        "'rss_mb': [int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')][0] / 1024}))"
    )
    import json

    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], check=True, timeout=120)
    result = json.loads(proc.stdout)
    assert result["sig"] == "xid-79" and result["lines"] == [1], result
    assert result["rss_mb"] < 200, result


@pytest.mark.parametrize("early", [
    "RuntimeError: CUDA error: CUDA_ERROR_CONTAINED: Invalid access of peer GPU memory over nvlink or a hardware error",
    "RuntimeError: CUDA error: uncorrectable ECC error encountered",
])
def test_an_xid_long_after_a_fault_that_defers_to_it_still_takes_over(early: str) -> None:
    # The early CUDA error outranks every Xid by priority but defers to the driver's record (decide):
    # pruning must keep scanning for Xid rows however far the Xid line comes after it.
    noise = b"".join(b"[INFO] iteration %d | loss 1.0\n" % i for i in range(300))
    late = b"NVRM: Xid (PCI:0000:3b:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 0)\n"
    data = early.encode() + b"\n" + noise + late + noise
    full = _verdict(data, window_bytes=4096, prune=False, threads=1)
    assert full.signature == "xid-13"
    assert _verdict(data, window_bytes=4096, threads=1) == full
