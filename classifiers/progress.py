"""Training-progress analyzer: read the loss / loss-scale / grad-norm series a job prints.

Pure and bounded: it is given lines (the head and the tail the scanner kept, never the whole
file) as `(key, bytes)` pairs and returns `Finding`s whose evidence names those keys, so the
caller maps them to line numbers. No I/O, no state between calls.

What it detects (each yields a `numerical` finding):
- `loss-nonfinite`: the loss series ends in NaN/Inf (the last loss printed is non-finite) — a loss
  that printed nan once and recovered is an fp16 skipped step, not a failure;
- `loss-diverged`: after warm-up (the first 20% of the series) the loss rises by a large factor over
  its running median and stays up to the end of the series (e.g. 6 -> 11 -> 14); a series too
  short for that (three or four values) counts when its last loss is a thousand times the median
  of the ones before it and at least 100 (0.36 -> 22.9 -> 3.1e9); so do spikes of ten times the
  level before them that recur, the last loss printed being one (0.25 -> 4.3 -> 0.8 -> 6.7);
- `loss-scale-collapsed`: the fp16 dynamic loss scale was driven down to its minimum (<= 1) and
  steps still overflow there ("Attempted loss scale: 1, reducing to 1");
- `overflow-run`: a long run of skipped overflow steps that ends with the scale already small
  (<= 64), i.e. not the normal start-up search from 2**16 / 2**32 down to a working scale;
- `grad-norm-nonfinite`: the grad-norm series ends with two or more non-finite values while the
  loss does not recover them;
- `overflow-routine` (a `success` finding, not numerical): fp16 overflow skips whose loss scale
  stays at a working size (>= 64) and nothing else numerical: dynamic loss scaling probing a
  higher scale and backing off (apex, DeepSpeed), routine in healthy runs. It outranks the bare
  `grad-overflow` row by one point, so any real failure line still wins, and a scheduler fact of
  failure removes it like every success;
- `step-metrics-nonfinite`: a job that prints no loss by name (an energy, a reward, a score) but
  numbered step lines (`Step 03455: nan E_h, variance=nan`, `iter 120 | nan | 0.3`) whose last
  lines carry NaN/Inf after finite ones: the objective went non-finite and stayed.

Formats: Megatron (`lm loss: 2.31E+00 | loss scale: 65536.0 | grad norm: 1.2 | number of skipped
iterations: 0`), HF Trainer dicts (`{'loss': 2.31, 'grad_norm': 1.2, ...}`), DeepSpeed
(`OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1`, `Reducing dynamic loss
scale from 8.0 to 4.0`), apex (`Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale
to 1`), Lightning / plain (`step 100 | loss 2.3`, `loss=2.3`, `Loss is Infinity`), gradient boosting's
per-round training objective (XGBoost `[30]\ttrain-rmse:26.6`, LightGBM, CatBoost).
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable, Sequence
from statistics import median
from typing import NamedTuple

MAX_LINE = 4096  # longer lines are progress bars or dumps: only their first bytes are parsed

_NUM = rb"(nan|[-+]?inf(?:inity)?|[-+]?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)"
# What may follow the key `loss` (found by a plain substring search in the lower-cased line):
# `: 2.3`, `=2.3`, ` 2.3`, `': 2.3`, ` is Infinity`; never `loss scale` / `loss_scale`.
_AFTER_LOSS = re.compile(rb"(?:es)?['\"]?[ \t]*(?:[:=]|is\b)?[ \t]*['\"]?[ \t]*" + _NUM + rb"(?![a-z0-9_])")
# A training prefix directly before `loss` (train_loss, lm loss, total_loss ...); any other word
# glued on with `_` (giou_loss, val_loss) makes it a component, not the training loss.
_PREFIXES = (b"lm ", b"train ", b"train_", b"training ", b"training_", b"total ", b"total_", b"step_",
             b"reduced_train_", b"avg ", b"avg_", b"mean ", b"mean_")
_NOT_TRAIN = re.compile(rb"(?:val|valid|validation|eval|test|dev)$")
_GRAD = re.compile(rb"grad[ _]?norm['\"]?[ \t]*[:=]?[ \t]*" + _NUM)
_SCALE = re.compile(rb"loss[ _]scale['\"]?[ \t]*[:=][ \t]*" + _NUM)
# The current scale on a progress line, any separator (fairseq: `| loss_scale 0.000 |`).
_REPORTED_SCALE = re.compile(rb"(?<![a-z_])loss[ _]scale['\"]?[ \t]*[:=]?[ \t]*" + _NUM + rb"(?![a-z0-9_.])")
# fp16 dynamic loss scaling starts at 2**15..2**32 and halves on each overflow; a scale below 1
# means steps overflow even with the gradients scaled down (fairseq stops at --min-loss-scale,
# 1e-4, "Minimum loss scale reached"; Megatron and DeepSpeed floor at 1).
COLLAPSED_SCALE = 1.0
_REDUCE = re.compile(
    rb"(?:attempted loss scale:?[ \t]*" + _NUM + rb",?[ \t]*reducing to[ \t]*" + _NUM
    + rb"|reducing (?:dynamic )?loss scale (?:from[ \t]*" + _NUM + rb"[ \t]*)?to[ \t]*" + _NUM + rb")",
)
_OVERFLOW = re.compile(rb"overflow!? (?:rank [0-9]+ )?skipping step|overflow detected|grad(?:ient)? overflow",
                       )
_SKIPPED = re.compile(rb"number of skipped iterations:[ \t]*([0-9]+)")
_KEYWORDS = (b"loss", b"grad", b"overflow")
# Gradient-boosting libraries print their training objective per round, not as `loss`: XGBoost
# (`[30]\ttrain-rmse:26.61`), LightGBM (`[10]\ttraining's l2: 0.12`), CatBoost (`30:\tlearn: 0.68`).
# Only lower-is-better losses: a rising AUC is progress.
_BOOSTING = re.compile(
    rb"^\[[0-9]+\]\t(?:train|training)(?:-|'s )(?:rmse|mae|rmsle|logloss|mlogloss|l1|l2|huber|mape"
    rb"|binary_logloss|multi_logloss|cross_entropy|[a-z]+-nloglik):?[ \t]*" + _NUM + rb"(?![a-z0-9_])"
    rb"|^[0-9]+:\tlearn:[ \t]*" + _NUM + rb"(?![a-z0-9_])")
# A numbered progress line (step / iter / iteration / epoch-step counter) and a NaN/Inf token on it.
_STEP = re.compile(rb"(?<![a-z0-9_])(?:step|iter|iteration|it)[ \t]*[:=#]?[ \t]*[0-9]+")
_NONFINITE_TOKEN = re.compile(rb"(?<![a-z0-9_.])(?:nan|[-+]?inf(?:inity)?)(?![a-z0-9_])")
STEP_TAIL = 2  # the last this many step lines must all be non-finite

WARMUP_FRACTION = 0.2
MIN_SERIES = 5  # fewer loss values than this say nothing about a trend
DIVERGENCE_FACTOR = 1.8  # loss over its running median by this factor ...
DIVERGENCE_ABS = 0.5  # ... and by at least this much in absolute terms
# Too short a series for a trend can still show a blow-up: a last loss a thousand times the ones
# before it and in the hundreds or more (0.36 -> 22.9 -> 3.1e9) is no healthy run's.
EXPLOSION_FACTOR = 1000.0
EXPLOSION_ABS = 100.0
# A loss ten times the level before it is a spike, not step noise; one that comes back down is
# noise, but a spike that recurs and is where the series ends is an instability that won.
SPIKE_FACTOR = 10.0
BASELINE_WINDOW = 50  # a loss is judged against the median of the ones printed just before it
OVERFLOW_RUN = 6
SMALL_SCALE = 64.0


class Finding(NamedTuple):
    signature: str
    priority: int
    confidence: float
    hint: str
    evidence: tuple[tuple[Hashable, str], ...]  # (caller's key, line text), first = deciding line
    cause: str = "numerical"  # a Cause value (progress findings are numerical but for overflow-routine)


# Priorities sit in the numerical band (rules.py): above nccl_timeout (60), time_limit (56) and
# success (5), below every hardware, node, host-memory, OOM and environment row.
_P_NONFINITE, _P_COLLAPSE, _P_DIVERGED, _P_OVERFLOW, _P_GRAD = 70, 68, 64, 62, 62
_P_ROUTINE = 32  # one above rules.py's grad-overflow row (31), below every failure row that matters


HINTS = {
    "loss-nonfinite": "the training loss became NaN/Inf and stayed there: lower the LR / enable clipping, "
                      "check the data at that step, resume from the last good checkpoint (not a node fault)",
    "loss-diverged": "the loss diverged after warm-up: lower the LR / raise warm-up, enable grad clipping, "
                     "look at the data near that step; resume from a checkpoint before the rise",
    "loss-scale-collapsed": "the fp16 loss scale collapsed to its minimum and steps still overflow: the model "
                            "produces inf/nan gradients; use bf16, lower the LR, or find the layer that overflows",
    "overflow-run": "fp16 overflow on step after step with the loss scale already small: the gradients "
                    "overflow every step; use bf16, lower the LR, or check for inf in the data",
    "overflow-routine": "fp16 overflow skips at a working loss scale: dynamic loss scaling at work, not a "
                        "failure; if the job died, the cause is elsewhere in the log",
    "step-metrics-nonfinite": "the numbers the job prints each step became NaN/Inf and stayed: the run diverged; "
                              "lower the learning rate / step size, check the inputs, resume from a good checkpoint",
    "grad-norm-nonfinite": "the gradient norm is NaN/Inf on every recent step: the update is garbage (fp16 "
                           "overflow or a bad batch); use bf16 / lower the LR / enable anomaly detection",
}


def _value(raw: bytes) -> float:
    text = raw.lower()
    if text == b"nan":
        return math.nan
    if text.lstrip(b"+-").startswith(b"inf"):
        return -math.inf if text.startswith(b"-") else math.inf
    return float(text)


class _Point(NamedTuple):
    key: Hashable
    value: float
    text: bytes


def _loss_of(low: bytes) -> float | None:
    """The training loss on a lower-cased line, or None."""
    at = low.find(b"loss")
    while at >= 0:
        nxt = low.find(b"loss", at + 4)
        match = _AFTER_LOSS.match(low, at + 4)
        if match is not None:
            key_at = at
            for prefix in _PREFIXES:
                if low.startswith(prefix, at - len(prefix)) and at >= len(prefix):
                    key_at = at - len(prefix)
                    break
            glued = key_at > 0 and (low[key_at - 1: key_at].isalnum() or low[key_at - 1: key_at] == b"_")
            before = low[max(0, key_at - 14): key_at].rstrip(b" _'\"\t")
            if not glued and not _NOT_TRAIN.search(before):
                try:
                    return _value(match.group(1))
                except ValueError:
                    pass
        at = nxt
    return None


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").rstrip("\r\n")[:500]


def analyze(lines: Sequence[tuple[Hashable, bytes]]) -> list[Finding]:
    """Findings over the given lines, in stream order (keys are the caller's, returned in evidence)."""
    losses: list[_Point] = []
    grads: list[_Point] = []
    events: list[tuple[Hashable, float, float, bytes]] = []  # overflow: (key, attempted, new, line)
    low_scale_skips: list[tuple[Hashable, bytes]] = []
    reported: list[_Point] = []  # the scale a progress line reports
    steps: list[tuple[Hashable, bool, bytes]] = []  # numbered progress lines: (key, non-finite, line)
    for key, raw in lines:
        line = raw[:MAX_LINE]
        low = line.lower()
        if b"overflow" not in low and b"skip" not in low:
            step = _STEP.search(low)
            if step is not None:
                steps.append((key, _NONFINITE_TOKEN.search(low, step.end()) is not None, line))
        if low[:1] in b"[0123456789" and b"\t" in low:
            boosting = _BOOSTING.match(low)
            if boosting is not None:
                try:
                    losses.append(_Point(key, _value(boosting.group(1) or boosting.group(2)), line))
                except ValueError:
                    pass
                continue
        if not any(word in low for word in _KEYWORDS):
            continue
        loss = _loss_of(low)
        if loss is not None:
            losses.append(_Point(key, loss, line))
        if b"grad" in low and b"norm" in low:
            grad = _GRAD.search(low)
            if grad is not None:
                try:
                    grads.append(_Point(key, _value(grad.group(1)), line))
                except ValueError:
                    pass
        if b"overflow" in low or b"reducing" in low:
            reduce = _REDUCE.search(low) if b"reducing" in low else None
            if b"hysteresis" in low:
                pass
            elif reduce is not None:
                nums = [g for g in reduce.groups() if g is not None]
                try:
                    new = _value(nums[-1])
                    old = _value(nums[0]) if len(nums) > 1 else new * 2
                    events.append((key, old, new, line))
                except ValueError:
                    pass
            elif _OVERFLOW.search(low):
                events.append((key, math.nan, math.nan, line))
        if b"scale" in low and b"reducing" not in low:
            shown = _REPORTED_SCALE.search(low)
            if shown is not None:
                try:
                    reported.append(_Point(key, _value(shown.group(1)), line))
                except ValueError:
                    pass
        if b"skipped iterations" in low and b"scale" in low:
            skipped = _SKIPPED.search(low)
            scale = _SCALE.search(low)
            if skipped and scale and int(skipped.group(1)) > 0:
                try:
                    if _value(scale.group(1)) <= 1.0:
                        low_scale_skips.append((key, line))
                except ValueError:
                    pass
    out: list[Finding] = []
    for finding in (_nonfinite(losses), _collapse(events, low_scale_skips, reported), _diverged(losses),
                    _overflow_run(events), _grad_nonfinite(grads, losses),
                    _steps_nonfinite(steps) if len(losses) < MIN_SERIES else None):
        if finding is not None:
            out.append(finding)
    if not out:
        routine = _overflow_routine(events, reported)
        if routine is not None:
            out.append(routine)
    return out


def _nonfinite(losses: Sequence[_Point]) -> Finding | None:
    bad = [p for p in losses if not math.isfinite(p.value)]
    if not bad or math.isfinite(losses[-1].value):
        return None
    last_good = next((p for p in reversed(losses) if math.isfinite(p.value)), None)
    evidence = [(bad[0].key, _text(bad[0].text))]
    if last_good is not None:
        evidence.append((last_good.key, _text(last_good.text)))
    evidence.append((bad[-1].key, _text(bad[-1].text)))
    return Finding("loss-nonfinite", _P_NONFINITE, 0.9, HINTS["loss-nonfinite"], tuple(evidence))


def _diverged(losses: Sequence[_Point]) -> Finding | None:
    values = [p for p in losses if math.isfinite(p.value)]
    # The series may end in nan: divergence before it is judged on the finite part.
    if any(p.value < 0 for p in values):
        return None
    if len(values) < MIN_SERIES:
        return _exploded(values)
    warm = max(2, int(len(values) * WARMUP_FRACTION))
    for i in range(warm, len(values)):
        # The baseline is the loss after warm-up: the first, high losses of a run that was still
        # learning would hide a later rise (15 -> 3 -> 2 -> 7 is a divergence, not a median of 8).
        after_warm = values[max(warm, i - BASELINE_WINDOW): i]
        base = median(p.value for p in after_warm) if len(after_warm) >= 2 else _level_before(values, i)
        if base <= 0:
            continue
        cur = values[i].value
        if cur < base * DIVERGENCE_FACTOR or cur - base < DIVERGENCE_ABS:
            continue
        rest = [p.value for p in values[i:]]
        tail = rest[-3:]
        ends_nonfinite = not math.isfinite(losses[-1].value)
        # It stays up (the median of the last three values is still far above the baseline) or the
        # series ends in nan: a single spike that comes back down is noise, not divergence.
        if ends_nonfinite or (len(rest) >= 2 and median(tail) >= base * DIVERGENCE_FACTOR * 0.9):
            evidence = ((values[i].key, _text(values[i].text)), (values[i - 1].key, _text(values[i - 1].text)),
                        (values[-1].key, _text(values[-1].text)))
            return Finding("loss-diverged", _P_DIVERGED, 0.8, HINTS["loss-diverged"], evidence)
    return _spikes_to_the_end(values, warm)


def _spikes_to_the_end(values: Sequence[_Point], warm: int) -> Finding | None:
    """Loss spikes that recur, the last loss printed one of them (0.25 -> 4.3 -> 0.8 -> 6.7): the
    run's instability came back and was still there where the series ends. The baseline is the
    level before the first spike, which the elevated losses between spikes would otherwise raise."""
    for first in range(warm, len(values) - 1):
        base = _level_before(values, first)
        if values[first].value >= SPIKE_FACTOR * base and values[first].value - base >= DIVERGENCE_ABS:
            break
    else:
        return None
    last = values[-1]
    if base <= 0 or last.value < SPIKE_FACTOR * base or last.value - base < DIVERGENCE_ABS:
        return None
    evidence = ((values[first].key, _text(values[first].text)), (values[first - 1].key, _text(values[first - 1].text)),
                (last.key, _text(last.text)))
    return Finding("loss-diverged", _P_DIVERGED, 0.8, HINTS["loss-diverged"], evidence)


def _level_before(values: Sequence[_Point], i: int) -> float:
    return median(p.value for p in values[max(0, i - BASELINE_WINDOW): i])


def _exploded(values: Sequence[_Point]) -> Finding | None:
    """A short series whose last loss blew up by orders of magnitude (see EXPLOSION_FACTOR)."""
    if len(values) < 3:
        return None
    base = median(p.value for p in values[:-1])
    last = values[-1]
    if base <= 0 or last.value < base * EXPLOSION_FACTOR or last.value < EXPLOSION_ABS:
        return None
    evidence = ((last.key, _text(last.text)), (values[-2].key, _text(values[-2].text)))
    return Finding("loss-diverged", _P_DIVERGED, 0.8, HINTS["loss-diverged"], evidence)


def _collapse(events: Sequence[tuple[Hashable, float, float, bytes]],
              low_scale_skips: Sequence[tuple[Hashable, bytes]], reported: Sequence[_Point] = ()) -> Finding | None:
    at_min = [e for e in events if math.isfinite(e[2]) and e[2] <= 1.0 and e[1] <= 2.0]
    hint = HINTS["loss-scale-collapsed"]
    if len(at_min) >= 2:
        return Finding("loss-scale-collapsed", _P_COLLAPSE, 0.88, hint,
                       ((at_min[0][0], _text(at_min[0][3])), (at_min[-1][0], _text(at_min[-1][3]))))
    if len(low_scale_skips) >= 3:
        return Finding("loss-scale-collapsed", _P_COLLAPSE, 0.85, hint,
                       ((low_scale_skips[0][0], _text(low_scale_skips[0][1])),
                        (low_scale_skips[-1][0], _text(low_scale_skips[-1][1]))))
    # The run's last reported scale is below 1: collapsed, whatever the loss looks like.
    if reported and 0.0 <= reported[-1].value < COLLAPSED_SCALE:
        first = next(p for p in reported if p.value < COLLAPSED_SCALE)
        evidence = ((first.key, _text(first.text)),) + (
            ((reported[-1].key, _text(reported[-1].text)),) if reported[-1].key != first.key else ())
        return Finding("loss-scale-collapsed", _P_COLLAPSE, 0.8, hint, evidence)
    return None


def _overflow_run(events: Sequence[tuple[Hashable, float, float, bytes]]) -> Finding | None:
    """A long run of skipped steps that ends at a small scale (not the start-up search)."""
    scaled = [e for e in events if math.isfinite(e[2])]
    if len(events) < OVERFLOW_RUN or not scaled or scaled[-1][2] > SMALL_SCALE:
        return None
    # A run: the last OVERFLOW_RUN events with scales that keep falling (or stay at the floor).
    run = scaled[-OVERFLOW_RUN:]
    if len(run) < OVERFLOW_RUN or any(b[2] > a[2] for a, b in zip(run, run[1:])):
        return None
    return Finding("overflow-run", _P_OVERFLOW, 0.8, HINTS["overflow-run"],
                   ((run[0][0], _text(run[0][3])), (run[-1][0], _text(run[-1][3]))))


def _grad_nonfinite(grads: Sequence[_Point], losses: Sequence[_Point]) -> Finding | None:
    if len(grads) < 3 or math.isfinite(grads[-1].value) or math.isfinite(grads[-2].value):
        return None
    if not any(math.isfinite(p.value) for p in grads):
        return None  # never finite: a logger that prints nan for a norm it does not compute
    first_bad = next(p for p in reversed(grads) if math.isfinite(p.value))
    start = grads[grads.index(first_bad) + 1]
    return Finding("grad-norm-nonfinite", _P_GRAD, 0.75, HINTS["grad-norm-nonfinite"],
                   ((start.key, _text(start.text)), (grads[-1].key, _text(grads[-1].text))))


def _steps_nonfinite(steps: Sequence[tuple[Hashable, bool, bytes]]) -> Finding | None:
    """Numbered step lines that end non-finite after finite ones (for jobs that name no loss)."""
    if len(steps) < MIN_SERIES + STEP_TAIL or not all(bad for _, bad, _ in steps[-STEP_TAIL:]):
        return None
    good = [s for s in steps[:-STEP_TAIL] if not s[1]]
    if len(good) < MIN_SERIES:
        return None  # never finite: a logger that prints nan for what it does not compute
    first_bad = next(i for i in range(len(steps) - 1, -1, -1) if not steps[i][1]) + 1
    evidence = ((steps[first_bad][0], _text(steps[first_bad][2])), (good[-1][0], _text(good[-1][2])),
                (steps[-1][0], _text(steps[-1][2])))
    return Finding("step-metrics-nonfinite", _P_GRAD, 0.75, HINTS["step-metrics-nonfinite"], evidence)


def _overflow_routine(events: Sequence[tuple[Hashable, float, float, bytes]],
                      reported: Sequence[_Point]) -> Finding | None:
    """Overflow skips that leave the scale at a working size: the loss scaler at work."""
    scaled = [e for e in events if math.isfinite(e[2])]
    if not scaled or any(e[2] < SMALL_SCALE for e in scaled):
        return None
    if reported and reported[-1].value < SMALL_SCALE:
        return None
    return Finding("overflow-routine", _P_ROUTINE, 0.5, HINTS["overflow-routine"],
                   ((scaled[-1][0], _text(scaled[-1][3])),) + (
                       ((scaled[0][0], _text(scaled[0][3])),) if scaled[0][0] != scaled[-1][0] else ()),
                   cause="success")
