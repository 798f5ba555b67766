#!/usr/bin/env python3
"""How much `pitstop run` costs: output throughput against `| tee`, and start-up against bare.

    .venv/bin/python bench/wrapper_throughput.py [--mb 1024] [--reps 3] [--startup-reps 20]

Throughput: the wall time of `pitstop run -- CHILD > /dev/null` over `CHILD | tee FILE > /dev/null`,
run alternately, median of --reps, for two children printing --mb MiB:
  firehose  writes prebuilt 1 MiB blocks of log lines (the worst case: the consumer is the limit)
  logger    formats and writes line by line, like a training script's logger
The CPU seconds of both pipelines are printed too: where the wrapper's extra work (a second full
copy of the log, the classifier scanning it, Python start-up) needs more CPU than the machine has
idle beside `tee`, that floor shows it.
Start-up: time from launch until the child runs (the child prints its own start time), and the
total wall time of `pitstop run -- true`, each against the bare command. Figures in ms.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
PITSTOP = str(BIN / "pitstop")

FIREHOSE = """
import sys
block = b"".join(b"step %08d loss 2.3456 lr 3.0e-4 tokens/s 123456 grad_norm 0.98\\n" % i for i in range(16384))[: 1 << 20]
out = sys.stdout.buffer
for _ in range(int(sys.argv[1])):
    out.write(block)
"""

LOGGER = """
import sys
write = sys.stdout.write  # block-buffered, one formatted line at a time, like a training logger
for i in range(int(sys.argv[1]) * (1 << 20) // 64):
    write(f"step {i:08d} loss {2.3456:.4f} lr 3.0e-4 tokens/s 123456 grad_norm 0.9\\n")
"""


def wall(cmd: list[str], env: dict, cpu: list[float] | None = None) -> float:
    """Wall time of `cmd`; appends its CPU seconds (user + sys, all its processes) to `cpu`."""
    os.sync()  # each run starts with no dirty pages of the one before writing back under it
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        subprocess.run(cmd, stdout=devnull, env=env, check=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cpu is not None:
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return elapsed


def throughput(name: str, script: str, mb: int, reps: int, scratch: Path, env: dict) -> tuple[float, float]:
    script_file = scratch / f"{name}.py"
    script_file.write_text(script)
    child = [sys.executable, str(script_file), str(mb)]
    tee_file = scratch / "tee.out"
    tee_cmd = ["bash", "-o", "pipefail", "-c", f"{shlex.join(child)} | tee {shlex.quote(str(tee_file))}"]
    wrapped, teed, classify, tee_cpu, wrapped_cpu = [], [], [], [], []
    for _ in range(reps):
        teed.append(wall(tee_cmd, env, tee_cpu))
        tee_file.unlink()
        wrapped.append(wall([PITSTOP, "run", "--quiet", "--", *child], env, wrapped_cpu))
        classify.append(_classify_s(scratch / "home" / "runs"))
        shutil.rmtree(scratch / "home" / "runs", ignore_errors=True)
    w, t, c = statistics.median(wrapped), statistics.median(teed), statistics.median(classify)
    pumped = statistics.median(x - y for x, y in zip(wrapped, classify))
    print(f"{name:9s} {mb} MiB: pitstop run {w:6.2f}s  | tee {t:6.2f}s  ratio {w / t:.3f}  "
          f"(runs: {', '.join(f'{x:.2f}' for x in wrapped)} vs {', '.join(f'{x:.2f}' for x in teed)})")
    print(f"{'':9s} after the child ended, finishing the classification took {c:.2f}s; "
          f"without it {pumped:6.2f}s, ratio {pumped / t:.3f}")
    wc, tc = statistics.median(wrapped_cpu), statistics.median(tee_cpu)
    print(f"{'':9s} CPU seconds (child + consumer, user + sys): pitstop run {wc:.2f}  | tee {tc:.2f}  "
          f"ratio {wc / tc:.2f}; on {os.cpu_count()} CPUs the wall ratio cannot be below "
          f"~{wc / ((os.cpu_count() or 1) * t):.2f} (all CPUs busy)")
    return w, t


def _classify_s(runs: Path) -> float:
    import json

    try:
        [run] = list(runs.iterdir())
        return float(json.loads((run / "result.json").read_text()).get("classify_s", 0.0))
    except (OSError, ValueError):
        return 0.0


def child_start_ms(cmd: list[str], env: dict) -> float:
    start = time.time_ns()
    out = subprocess.run(cmd, capture_output=True, env=env, check=True).stdout.split()
    return (int(out[0]) - start) / 1e6


def startup(reps: int, env: dict, scratch: Path) -> None:
    date = shutil.which("date") or "/bin/date"
    bare = [child_start_ms([date, "+%s%N"], env) for _ in range(reps)]
    wrapped = [child_start_ms([PITSTOP, "run", "--quiet", "--", date, "+%s%N"], env) for _ in range(reps)]
    true = shutil.which("true") or "/bin/true"
    bare_total = [wall([true], env) * 1000 for _ in range(reps)]
    wrapped_total = [wall([PITSTOP, "run", "--quiet", "--", true], env) * 1000 for _ in range(reps)]
    shutil.rmtree(scratch / "home" / "runs", ignore_errors=True)
    b, w = statistics.median(bare), statistics.median(wrapped)
    bt, wt = statistics.median(bare_total), statistics.median(wrapped_total)
    print(f"start-up: child starts {w - b:.1f} ms later under pitstop run (median {w:.1f} vs {b:.1f} ms, {reps} reps)")
    print(f"total:    pitstop run -- true {wt:.0f} ms vs true {bt:.1f} ms: overhead {wt - bt:.0f} ms "
          "(settings, store, classifier and the report after the child ends)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--startup-reps", type=int, default=20)
    parser.add_argument("--skip-logger", action="store_true", help="only the firehose child")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="pitstop-bench-"))
    env = {**os.environ, "PITSTOP_HOME": str(scratch / "home")}
    env.pop("PITSTOP_CONFIG", None)
    env.pop("PITSTOP_NOTIFY__URLS", None)
    try:
        print(f"host {os.uname().nodename}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
        startup(args.startup_reps, env, scratch)
        throughput("firehose", FIREHOSE, args.mb, args.reps, scratch, env)
        if not args.skip_logger:
            throughput("logger", LOGGER, args.mb, args.reps, scratch, env)
        print(f"load at end {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
