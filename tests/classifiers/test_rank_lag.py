"""The lagging rank, from per-rank lines in the real formats of torchtitan, Megatron-LM and
DeepSpeed (sources in classifiers/rank_lag.py's docstring)."""

from __future__ import annotations

import random

from classifiers.rank_lag import analyze


def titan(rank: int, step: int, tps: int) -> str:
    # torchtitan's metrics line behind torchrun's `--role rank --tee 3` prefix (pytorch/torchtitan#1287)
    return (f"[rank{rank}]:[titan] 2025-06-16 22:30:{step % 60:02d},322 - root - INFO - step: {step}  "
            f"loss:  6.1384  memory: 49.66GiB(52.28%)  tps: {tps:,}  tflops: 339.16  mfu: 34.29%")


def megatron(task: int, it: int, ms: float) -> str:
    # Megatron-LM's training_log line behind `srun --label`
    return (f"{task}:  [2024-03-07 15:27:02] iteration      {it}/  317892 | consumed samples:       152832 | "
            f"consumed tokens:    625999872 | elapsed time per iteration (ms): {ms:.1f} | "
            f"throughput per GPU (TFLOP/s/GPU): 412.7 | learning rate: 2.407E-04 | global batch size:   768 |")


def deepspeed(rank: int, fwd: float, bwd_inner: float) -> str:
    # DeepSpeed's wall_clock_breakdown through log_dist
    return (f"[2024-04-04 09:09:53,313] [INFO] [logging.py:96:log_dist] [Rank {rank}] time (ms) | "
            f"fwd_microstep: {fwd:.2f} | bwd_microstep: {bwd_inner + 60:.2f} | bwd_inner_microstep: {bwd_inner:.2f} | "
            f"bwd_allreduce_microstep: 60.00 | step_microstep: 0.05")


def test_torchtitan_rank_with_low_tokens_per_second_is_named():
    rng = random.Random(4)
    lines = ["[rank0]:[titan] 2025-06-16 22:30:48,735 - root - INFO - [GC] Peforming periodical GC collection. 0.06 seconds."]
    for step in range(10, 310, 10):
        for rank in range(8):
            base = 4_100 if rank == 5 else 5_860
            lines.append(titan(rank, step, int(base + rng.uniform(-40, 40))))
    report = analyze(lines)
    assert report.metric == "tokens_per_s" and report.ranks_seen == 8
    [lag] = report.lagging
    assert lag.rank == 5 and 29 < lag.behind_pct < 31
    assert "tps: 4," in lag.evidence[-1].text and lines[lag.evidence[-1].line - 1].startswith("[rank5]:")
    assert lag.evidence[-1].line == len(lines) - 2  # ranks 6 and 7 print after it


def test_megatron_step_time_under_srun_labels():
    lines = []
    for it in range(100, 130):
        for task in range(4):
            lines.append(megatron(task, it, 1843.2 + (700 if task == 2 and it > 105 else 0) + it % 3))
    report = analyze(lines)
    assert report.metric == "step_time_ms"
    assert [lag.rank for lag in report.lagging] == [2]
    assert report.lagging[0].value > 2500  # the tail: the slow steps, not the early fast ones


def test_deepspeed_compute_breakdown():
    lines = [deepspeed(r, 1057.0 + r, 497.0 + (350 if r == 7 else 0)) for _ in range(12) for r in range(16)]
    report = analyze(lines)
    assert report.metric == "compute_ms" and [lag.rank for lag in report.lagging] == [7]
    assert report.per_rank[0] == 1057.0 + 497.0


def test_healthy_noise_and_synchronous_equal_ranks_name_nobody():
    rng = random.Random(9)
    lines = [titan(r, s, int(5_860 * rng.uniform(0.97, 1.03))) for s in range(40) for r in range(8)]
    assert analyze(lines).lagging == []
    same = [titan(r, s, 5_860) for s in range(5) for r in range(8)]  # MAD 0, no gap
    assert analyze(same).lagging == []


def test_too_few_ranks_or_no_rank_prefix():
    two = [titan(r, s, 5_000 if r else 2_000) for s in range(5) for r in range(2)]
    report = analyze(two)
    assert report.lagging == [] and "at least 3" in report.notes[0]
    # rank 0 only, as Megatron prints it by default: nothing to compare, nothing invented
    plain = [megatron(0, it, 1800.0)[3:] for it in range(10)]
    assert analyze(plain).metric is None and analyze(plain).lagging == []


def test_garbage_and_huge_lines_do_not_crash():
    lines = ["\x00\xff" * 10_000, "[rank3]: tps: ,,,", "[rank1]: tps: 1e999999", "3: elapsed time per iteration (ms): -5",
             "[rank2]:" + "tps: 12 " * 100_000]
    report = analyze(lines)
    assert report.lagging == []
