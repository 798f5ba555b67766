"""Throughput of `pitstop classify` on a big generated log vs `grep -E -c` with the same patterns.

    .venv/bin/python bench/classify_throughput.py [--size-mb 1024] [--keep] [--log PATH] [--runs 2]

Generates synthetic training-log lines with a few real-format faults at random depths (one near
the very start, so a reader that only looks at the tail would miss the root cause), times
`pitstop classify --json` and `grep -E -c -i -f PATTERNS` (the same rule patterns) on it, prints
both, the ratios and the classifier's peak RSS, and deletes the file. The page cache is warmed
first, and each command runs `--runs` times; the last run counts (warm caches for everyone, the
Hyperscan database cache included). `--log` times an existing file instead of generating one.

grep runs twice: in the caller's locale and with LC_ALL=C. In a UTF-8 locale GNU grep -i has to
case-fold multibyte characters and is many times slower, so the honest target (ratio <= 1.0) is
against the faster LC_ALL=C run; both ratios are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from classifiers.rules import grep_ere_patterns  # noqa: E402

FAULTS = [
    b"[Tue Mar  4 10:00:01 2025] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus.\n",
    b"[rank3]:[E ProcessGroupNCCL.cpp:828] [Rank 3] Watchdog caught collective operation timeout: "
    b"WorkNCCL(SeqNum=118, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600341 milliseconds before timing out.\n",
    b"epoch 12 step 99120 | loss nan | lr 3.0e-04\n",
]


def _training_block(rng: random.Random, size: int) -> bytes:
    lines = []
    total = 0
    step = 0
    while total < size:
        step += 1
        line = (
            f"[2025-03-04 10:{step % 60:02d}:{step % 59:02d},{rng.randrange(1000):03d}] [INFO] [rank{rng.randrange(64)}] "
            f"iteration {step:>8}/ 500000 | consumed samples: {step * 512:>12} | elapsed time per iteration (ms): "
            f"{rng.uniform(300, 900):.1f} | learning rate: {rng.uniform(1e-5, 3e-4):.3E} | lm loss: {rng.uniform(1.5, 4):.6E} "
            f"| grad norm: {rng.uniform(0.1, 2):.3f} | tokens/s {rng.randrange(10**5, 10**6)}\n"
        ).encode()
        lines.append(line)
        total += len(line)
    return b"".join(lines)


def generate(path: Path, size_mb: int, seed: int = 7, early_fault: bool = True) -> list[int]:
    """Write ~size_mb MiB of log with FAULTS at random depths; returns the fault byte offsets.

    Without `early_fault` the Xid line moves deep into the file too: then no strong hit arrives
    early, so the scanner cannot drop weaker rules for most of the file (the harder case).
    """
    rng = random.Random(seed)
    block = _training_block(rng, 4 * 1024 * 1024)
    target = size_mb * 1024 * 1024
    first = rng.randrange(1, 64) if early_fault else rng.randrange(target // 4, target)
    depths = sorted([first] + [rng.randrange(target // 4, target) for _ in FAULTS[1:]])
    offsets = []
    written = 0
    with open(path, "wb") as out:
        for fault, depth in zip(FAULTS, depths):
            while written + len(block) <= depth:
                out.write(block)
                written += len(block)
            offsets.append(written)
            out.write(fault)
            written += len(fault)
        while written < target:
            chunk = block if written + len(block) <= target else block[: block.rfind(b"\n", 0, target - written) + 1]
            if not chunk:
                break
            out.write(chunk)
            written += len(chunk)
    return offsets


def _timed(cmd: list[str], runs: int, env: dict[str, str] | None = None) -> tuple[float, subprocess.CompletedProcess]:
    """Wall time of the last of `runs` runs (the earlier ones warm every cache)."""
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, env=env)
        elapsed = time.perf_counter() - start
    return elapsed, proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--keep", action="store_true", help="keep the generated log")
    parser.add_argument("--log", type=Path, help="time this existing log instead of generating one")
    parser.add_argument("--runs", type=int, default=2, help="runs per command; the last one counts")
    parser.add_argument("--late-faults", action="store_true",
                        help="put every fault (the Xid too) deep in the file: the harder case")
    parser.add_argument("--skip-locale", action="store_true",
                        help="skip the (minutes-long) grep run in the caller's UTF-8 locale")
    args = parser.parse_args()

    pitstop = shutil.which("pitstop") or str(Path(sys.executable).with_name("pitstop"))
    workdir = Path(tempfile.mkdtemp(prefix="pitstop-bench-"))
    log = args.log or workdir / "train.log"
    patterns = workdir / "patterns.ere"
    try:
        patterns.write_text("\n".join(grep_ere_patterns()) + "\n")
        if args.log is None:
            offsets = generate(log, args.size_mb, early_fault=not args.late_faults)
            print(f"generated {log.stat().st_size / 2**20:.0f} MiB, faults at byte offsets {offsets}")
        else:
            print(f"timing {log} ({log.stat().st_size / 2**20:.0f} MiB)")
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache

        classify_s, proc = _timed([pitstop, "classify", "--json", str(log)], args.runs)
        # Only the classifier has run as a child so far: this is its peak RSS.
        peak_rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        if proc.returncode != 0:
            print(proc.stderr.decode(errors="replace"), file=sys.stderr)
            return 1
        verdict = json.loads(proc.stdout.decode().splitlines()[0])
        grep_cmd = ["grep", "-E", "-c", "-i", "-f", str(patterns), str(log)]
        c_env = {**os.environ, "LC_ALL": "C"}
        grep_c_s, cproc = _timed(grep_cmd, args.runs, env=c_env)
        locale_name = os.environ.get("LC_ALL") or os.environ.get("LC_CTYPE") or os.environ.get("LANG") or "(unset)"
        if not args.skip_locale:
            grep_s, gproc = _timed(grep_cmd, 1)  # this run can take minutes: once is enough
        size_mb = log.stat().st_size / 1e6
        print(f"pitstop classify: {classify_s:.2f} s ({size_mb / classify_s:.0f} MB/s) -> {verdict['cause']} "
              f"({verdict['signature']}), evidence lines {[e['line'] for e in verdict['evidence']]}")
        print(f"grep -E -c -i (LC_ALL=C)       : {grep_c_s:.2f} s ({size_mb / grep_c_s:.0f} MB/s) -> "
              f"{cproc.stdout.decode().strip()} matching lines")
        if not args.skip_locale:
            print(f"grep -E -c -i (locale {locale_name}): {grep_s:.2f} s  -> {gproc.stdout.decode().strip()} matching lines")
            print(f"ratio classify/grep (locale {locale_name}): {classify_s / grep_s:.3f}")
        print(f"ratio classify/grep (LC_ALL=C): {classify_s / grep_c_s:.3f}  (target <= 1.0, against the faster grep)")
        print(f"classifier peak RSS: {peak_rss_mb:.0f} MiB  (target < 200)")
        return 0
    finally:
        if args.keep and args.log is None:
            patterns.unlink(missing_ok=True)
            print(f"kept {log}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)  # never holds a --log file


if __name__ == "__main__":
    raise SystemExit(main())
