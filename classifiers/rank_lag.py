"""The rank that lags: from a job's per-rank throughput lines, the ranks whose step time or
tokens/s sits well behind the others (a slow GPU, a x8 link, a throttled node slows every step).

Pure: given lines, returns the lagging ranks with the lines that show it. Each rank's figure is
the median of its last `TAIL` samples (start-up, compilation and checkpoint steps fall out), and
ranks are compared by the modified z-score over the median absolute deviation (the same test the
sweep uses, pitstop.node.stragglers.robust_outliers) and a minimum relative gap.

Formats (the rank comes from the line's prefix; a line with no rank is not attributed):
- torchtitan (pytorch/torchtitan, e.g. PR #1287's log): `[rank3]:[titan] 2025-06-16 22:30:50,322 -
  root - INFO - step: 200  loss:  6.1384  memory: 49.66GiB(52.28%)  tps: 5,856  tflops: 339.16
  mfu: 34.29%` (`wps:` in older versions); `[rankN]:` is torchrun's `--role rank --tee 3` prefix,
  on every rank with torchtitan's `LOG_RANK=0,1,...`.
- Megatron-LM training_log: `iteration 199/ 317892 | consumed samples: ... | elapsed time per
  iteration (ms): 14287.5 | throughput per GPU (TFLOP/s/GPU): 412.7 | ...`.
- DeepSpeed wall_clock_breakdown (log_dist): `[Rank 3] time (ms) | fwd_microstep: 1057.35 |
  bwd_microstep: 563.43 | bwd_inner_microstep: 497.01 | bwd_allreduce_microstep: 66.16 | ...`:
  forward + inner backward is the rank's own compute, before it waits for the others.
- DeepSpeed ThroughputTimer (deepspeed/utils/timer.py): `epoch=0/micro_step=40/global_step=10,
  RunningAvgSamplesPerSec=25.02, CurrSamplesPerSec=25.70, MemAllocated=4.32GB, ...`.
In a synchronous job every rank waits for the slowest at each collective, so wall-clock step
times converge; the lag shows best in per-rank compute timers (DeepSpeed's breakdown above),
and in step times of ranks that do not synchronise every step (pipeline stages, async work).
Rank prefixes: `[rank5]:` (torchrun, global rank), `5: ` (srun --label, the task = the rank),
`[Rank 5]` (DeepSpeed's log_dist).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from typing import Literal, NamedTuple

from pydantic import BaseModel, Field

from pitstop.models import Evidence
from pitstop.node.stragglers import robust_outliers

MAX_LINE = 4096  # longer lines are dumps, not progress lines
TAIL = 20  # samples per rank that count: the most recent ones
MIN_RANKS = 3  # fewer ranks than this have no "others" to lag behind
MAX_Z = 3.5
MIN_GAP = 0.10  # and at least 10 % slower than the median rank

_NUM = r"([0-9][0-9,]*(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)"


class _Format(NamedTuple):
    metric: str
    better: Literal["low", "high"]
    unit: str
    pattern: re.Pattern[str]


# First match wins per line; a line carrying several (Megatron's time and TFLOP/s) counts once,
# by the first that is listed here.
FORMATS: tuple[_Format, ...] = (
    # every number the pattern captures is summed: forward + inner backward
    _Format("compute_ms", "low", "ms", re.compile(r"fwd_microstep:\s*" + _NUM + r"\s*\|.*?bwd_inner_microstep:\s*" + _NUM)),
    _Format("step_time_ms", "low", "ms", re.compile(r"elapsed time per iteration \(ms\):\s*" + _NUM)),
    _Format("tokens_per_s", "high", "tokens/s", re.compile(r"\b(?:tps|wps):\s*" + _NUM)),
    _Format("samples_per_s", "high", "samples/s", re.compile(r"\bCurrSamplesPerSec=" + _NUM)),
    _Format("tflops_per_gpu", "high", "TFLOP/s", re.compile(r"throughput per GPU \(TFLOP/s/GPU\):\s*" + _NUM)),
)

_RANK_PREFIXES = (
    re.compile(r"^\[rank(\d+)\]:"),  # torchrun >= 2.2 (--role rank --tee 3)
    re.compile(r"^\s*(\d+): "),  # srun --label
)
_DEEPSPEED_RANK = re.compile(r"\[Rank (\d+)\]")


class RankLag(BaseModel):
    rank: int
    metric: str
    value: float = Field(description="the rank's median over its last samples")
    fleet_median: float = Field(description="the median rank's figure")
    behind_pct: float = Field(description="how far behind the median rank, in percent")
    samples: int
    evidence: list[Evidence] = Field(default_factory=list)

    @property
    def why(self) -> str:
        return f"rank {self.rank}: {self.metric} {self.value:g} vs median {self.fleet_median:g} ({self.behind_pct:.0f}% behind)"


class RankLagReport(BaseModel):
    metric: str | None = Field(default=None, description="the figure compared; None: no per-rank lines")
    ranks_seen: int = 0
    per_rank: dict[int, float] = Field(default_factory=dict)
    lagging: list[RankLag] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


def _rank(line: str) -> int | None:
    for regex in _RANK_PREFIXES:
        if m := regex.match(line):
            return int(m.group(1))
    m = _DEEPSPEED_RANK.search(line)
    return int(m.group(1)) if m else None


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def analyze(lines: Iterable[str]) -> RankLagReport:
    """Lines in log order (line numbers are 1-based positions in `lines`)."""
    samples: dict[str, dict[int, list[tuple[float, int, str]]]] = {}
    for number, raw in enumerate(lines, start=1):
        line = raw[:MAX_LINE]
        rank = _rank(line)
        if rank is None:
            continue
        for fmt in FORMATS:
            if m := fmt.pattern.search(line):
                parts = [_number(g) for g in m.groups()]
                value = sum(parts) if None not in parts else None  # type: ignore[arg-type]
                if value is not None and value > 0:
                    samples.setdefault(fmt.metric, {}).setdefault(rank, []).append((value, number, line.rstrip()))
                break
    report = RankLagReport()
    if not samples:
        report.notes.append("no per-rank step time or throughput lines")
        return report
    # the figure most ranks print decides (a job prints one format)
    metric = max(samples, key=lambda name: (len(samples[name]), -[f.metric for f in FORMATS].index(name)))
    fmt = next(f for f in FORMATS if f.metric == metric)
    by_rank = {rank: vals[-TAIL:] for rank, vals in samples[metric].items()}
    report.metric, report.ranks_seen = metric, len(by_rank)
    report.per_rank = {rank: statistics.median(v for v, _, _ in vals) for rank, vals in sorted(by_rank.items())}
    if len(by_rank) < MIN_RANKS:
        report.notes.append(f"{len(by_rank)} rank(s) print {metric}: at least {MIN_RANKS} are needed to compare")
        return report
    med = statistics.median(report.per_rank.values())
    worse: Literal["low", "high"] = "high" if fmt.better == "low" else "low"
    for out in robust_outliers(report.per_rank, worse, max_z=MAX_Z, min_gap=MIN_GAP * med):
        vals = by_rank[out.key]
        behind = (out.value / med - 1) if fmt.better == "low" else (1 - out.value / med)
        report.lagging.append(RankLag(
            rank=out.key, metric=metric, value=round(out.value, 3), fleet_median=round(med, 3),
            behind_pct=round(100 * behind, 1), samples=len(vals),
            evidence=[Evidence(line=n, text=t[:500]) for _, n, t in vals[-3:]],
        ))
    return report
