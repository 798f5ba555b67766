"""The training-progress analyzer: loss / loss-scale / grad-norm series in real formats."""

from __future__ import annotations

import io
import math
import random

import pytest

from pitstop.models import Cause, SchedulerFacts

from classifiers import classify_files, classify_text
from classifiers.progress import analyze
from classifiers.scan import HEAD_SAMPLE_BYTES, TAIL_SAMPLE_BYTES


def _sigs(text: str) -> list[str]:
    return [f.signature for f in analyze([(i + 1, line.encode()) for i, line in enumerate(text.splitlines())])]


def _megatron(losses, scale=65536.0, skipped=0, grad="1.2") -> str:
    return "\n".join(
        f" iteration {i + 1:8d}/  100000 | consumed samples: {(i + 1) * 512:10d} | elapsed time per iteration (ms): 812.3 |"
        f" learning rate: 3.000E-04 | global batch size:   512 | lm loss: {x:.6E} | loss scale: {scale} |"
        f" grad norm: {grad} | number of skipped iterations: {skipped:3d} | number of nan iterations:   0 |"
        for i, x in enumerate(losses)
    )


def _hf(losses) -> str:
    return "\n".join(
        f"{{'loss': {x!r}, 'grad_norm': 1.{i % 9}, 'learning_rate': 1.9e-05, 'epoch': {i / 100:.2f}}}"
        for i, x in enumerate(losses)
    )


def _plain(losses) -> str:
    return "\n".join(f"step {100 * (i + 1)} | loss {x:.4f} | lr 3.0e-04" for i, x in enumerate(losses))


DIVERGING = [6.9, 6.4, 6.1, 6.0, 5.9, 5.95, 6.0, 5.9, 6.1, 7.4, 9.8, 11.2, 11.6, 12.0]
NAN_AFTER_RISE = [6.2, 6.0, 5.9, 6.0, 6.1, 7.9, 11.0, float("nan"), float("nan")]


@pytest.mark.parametrize("fmt", [_megatron, _hf, _plain])
def test_divergence_after_warmup_is_numerical_never_success(fmt) -> None:
    log = fmt(DIVERGING) + "\n***** train metrics *****\nTraining finished\n"
    assert "loss-diverged" in _sigs(log)
    verdict = classify_text(log)
    assert verdict.cause is Cause.NUMERICAL and verdict.signature == "loss-diverged", verdict


@pytest.mark.parametrize("fmt", [_megatron, _hf, _plain])
def test_loss_that_goes_to_nan_is_numerical(fmt) -> None:
    log = fmt(NAN_AFTER_RISE) + "\nTraining finished\n"
    verdict = classify_text(log, SchedulerFacts(exit_code=0))
    assert verdict.cause is Cause.NUMERICAL, verdict
    assert any("nan" in e.text.lower() for e in verdict.evidence)


@pytest.mark.parametrize("fmt", [_megatron, _hf, _plain])
def test_healthy_noisy_curve_is_not_numerical(fmt) -> None:
    rng = random.Random(7)
    # Decaying loss with +-15% step noise, a few isolated spikes, and the fp16 start-up search.
    losses = [max(0.2, 2.5 * math.exp(-i / 300) + 1.6) * (1 + rng.uniform(-0.15, 0.15)) for i in range(600)]
    for at in (120, 333, 480):
        losses[at] *= 2.2  # one-step spikes that come back down
    log = fmt(losses) + "\nTraining finished\n"
    assert _sigs(log) == []
    assert classify_text(log).cause is not Cause.NUMERICAL


@pytest.mark.parametrize("fmt", [_megatron, _hf, _plain])
def test_divergence_is_judged_against_the_loss_after_warm_up(fmt) -> None:
    """A run that learned fast (15 -> 2.4) and then rose to 7: the high warm-up losses must not set
    the baseline (with them the median is 9-12 and hides the rise); a spike that comes back is
    still noise."""
    assert "loss-diverged" in _sigs(fmt([15.5, 14.0, 13.0, 12.0, 3.0, 2.5, 2.4, 6.5, 7.0]))
    assert _sigs(fmt([15.5, 14.0, 13.0, 12.0, 3.0, 2.5, 2.4, 6.5, 2.3, 2.2])) == []


@pytest.mark.parametrize("fmt", [_megatron, _hf, _plain])
def test_recurring_spikes_that_end_the_series_are_divergence(fmt) -> None:
    """A LoRA run steady at 0.25 spikes to 4.3, sits near 0.8, and its last loss is 6.7: the losses
    between the spikes raise a running median, so the level before the first spike is the baseline.
    One spike, or spikes that come back down, or a lone last spike stay noise."""
    base = [0.28, 0.26, 0.24, 0.25, 0.27, 0.24, 0.26]
    assert _sigs(fmt(base + [0.66, 0.80, 4.27, 0.77, 0.56, 0.82, 6.66])) == ["loss-diverged"]
    assert _sigs(fmt(base + [0.66, 0.80, 4.27, 0.77, 0.56, 6.66, 0.30, 0.27])) == []
    assert _sigs(fmt(base + [0.26, 0.25, 0.27, 0.24, 0.26, 0.25, 6.66])) == []
    assert _sigs(fmt(base + [0.26, 4.27, 0.27, 0.24, 0.26, 0.25, 0.26])) == []


def test_rising_loss_during_warmup_only_is_not_divergence() -> None:
    assert _sigs(_plain([2.0, 4.5, 6.0, 5.0, 4.2, 3.9, 3.6, 3.5, 3.3, 3.2])) == []


def test_single_nan_that_recovers_is_a_skipped_step() -> None:
    assert _sigs(_hf([2.1, 2.0, float("nan"), 1.9, 1.9, 1.8])) == []


def test_deepspeed_loss_scale_collapse() -> None:
    log = "\n".join(
        f"[2023-06-07 22:{m:02d}:00,018] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! Rank 0 "
        f"Skipping step. Attempted loss scale: {a}, reducing to {max(a // 2, 1)}"
        for m, a in enumerate([64, 32, 16, 8, 4, 2, 1, 1, 1])
    )
    assert "loss-scale-collapsed" in _sigs(log)
    verdict = classify_text(log + "\n{'train_runtime': 5122.1, 'train_loss': 2.01}\n")
    assert verdict.cause is Cause.NUMERICAL


def test_megatron_scale_one_with_skipped_iterations_collapses() -> None:
    log = _megatron([2.3] * 6, scale=1.0, skipped=10, grad="nan")
    assert "loss-scale-collapsed" in _sigs(log)


def test_bf16_megatron_scale_one_without_skips_is_healthy() -> None:
    assert _sigs(_megatron([2.3, 2.29, 2.27, 2.3, 2.26, 2.25, 2.24], scale=1.0)) == []


def test_startup_loss_scale_search_is_not_an_overflow_run() -> None:
    scales = [2**32 >> i for i in range(8)]
    log = "\n".join(
        f"[INFO] [stage2.py:1357:step] [deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {a}, reducing to {a // 2}"
        for a in scales
    ) + "\n" + _hf([2.1, 2.0, 1.95, 1.9, 1.9, 1.85])
    assert _sigs(log) == ["overflow-routine"]  # the scaler at work, not a failure finding


def test_long_overflow_run_at_small_scale() -> None:
    log = "\n".join(
        f"[INFO] [fused_optimizer.py:316:_update_scale] Grad overflow on iteration {i}\n"
        f"[INFO] [logging.py:60:log_dist] [Rank 0] Overflow detected. Skipping step. Attempted loss scale: {a}, reducing to {a / 2}"
        for i, a in enumerate([512.0, 256.0, 128.0, 64.0, 32.0, 16.0, 8.0, 4.0])
    )
    assert "overflow-run" in _sigs(log)


def test_validation_loss_is_not_the_training_series() -> None:
    lines = [f"epoch {i}: train loss : {1.0 - i * 0.01:.4f}\nvalidation loss: {1.0 + i * 0.5:.4f}" for i in range(12)]
    assert _sigs("\n".join(lines)) == []


def test_hardware_fault_outranks_the_analyzer() -> None:
    log = _plain(NAN_AFTER_RISE) + "\n[ 99.1] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
    assert classify_text(log).cause is Cause.GPU_HARDWARE


def test_only_head_and_tail_are_read_and_line_numbers_are_exact(tmp_path) -> None:
    # A big healthy middle, then divergence at the end: found from the tail, with true line numbers.
    path = tmp_path / "train.log"
    healthy = _plain([2.0 + 0.01 * (i % 7) for i in range(40000)])
    tail = _plain(DIVERGING)
    path.write_text(healthy + "\n" + tail + "\n")
    assert path.stat().st_size > HEAD_SAMPLE_BYTES + TAIL_SAMPLE_BYTES
    verdict = classify_files([path])
    assert verdict.signature == "loss-diverged", verdict
    lines = path.read_text().splitlines()
    for ev in verdict.evidence:
        assert lines[ev.line - 1] == ev.text, ev
    # The same through a pipe-like stream (counted as it passes) gives the same lines.
    piped = classify_text(io.BytesIO(path.read_bytes()).getvalue())
    assert [e.line for e in piped.evidence] == [e.line for e in verdict.evidence]


# Jobs that name no loss: a VMC energy (absl, google-deepmind/ferminet#57's format), an RL reward.
def _energy(values) -> str:
    return "\n".join(f"INFO:absl:Step {3440 + i:05d}: {v} E_h, variance={v if v != v else 0.05} E_h^2, pmove=0.52"
                     for i, v in enumerate(values))


def _reward(values) -> str:
    return "\n".join(f"iter {i + 1} | episode_reward {v} | fps 1200" for i, v in enumerate(values))


@pytest.mark.parametrize("fmt", [_energy, _reward])
def test_step_lines_that_end_non_finite_are_numerical(fmt) -> None:
    log = fmt([-14.91, -14.93, -14.92, -14.90, -14.91, -14.92, float("nan"), float("nan"), float("nan")])
    assert _sigs(log) == ["step-metrics-nonfinite"]
    verdict = classify_text(log + "\n", SchedulerFacts(exit_code=0))
    assert verdict.cause is Cause.NUMERICAL and verdict.signature == "step-metrics-nonfinite", verdict
    assert "nan" in verdict.evidence[0].text


@pytest.mark.parametrize("values", [
    [1.0, 1.1, float("nan"), 1.2, 1.1, 1.0, 1.1],               # one nan that recovered
    [float("nan")] * 8,                                          # never finite: nothing computed
    [1.0, 1.1, 1.2, float("nan"), float("nan")],                 # too short to say
    [1.0, 1.1, 1.2, 1.3, 1.1, 1.0, float("inf")],               # only the last line
], ids=["recovers", "never-finite", "short", "one-line"])
def test_step_lines_that_do_not_end_non_finite_say_nothing(values) -> None:
    assert "step-metrics-nonfinite" not in _sigs(_reward(values))


def test_a_named_loss_series_decides_over_step_lines() -> None:
    # every line has a finite loss; a nan in another column is not the step analysis' to call
    log = "\n".join(f"step {i} | loss {2.0 - i / 100:.3f} | val_acc nan" for i in range(1, 12))
    assert _sigs(log) == []


def test_skipped_fp16_steps_are_not_step_metrics() -> None:
    log = _reward([1.0, 1.1, 1.2, 1.3, 1.2, 1.1]) + "\n" + "\n".join(
        f"[deepspeed] OVERFLOW! Rank 0 Skipping step {i}. Attempted loss scale: 1024, reducing to 512 grad nan"
        for i in range(3))
    assert "step-metrics-nonfinite" not in _sigs(log)


# fp16 dynamic loss scaling probing up and backing off (NVIDIA/apex#864, DeepSpeed#931's formats)
APEX_PROBE = "\n".join(
    f"step {2000 * i} | lr 1e-4\nGradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 262144.0"
    for i in range(1, 4))
DS_STARTUP = "\n".join(
    f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {s}, reducing to {s // 2}"
    for s in (65536, 32768, 16384))


@pytest.mark.parametrize("log", [APEX_PROBE, DS_STARTUP], ids=["apex-probe", "deepspeed-startup"])
def test_overflow_skips_at_a_working_scale_are_routine(log) -> None:
    assert _sigs(log) == ["overflow-routine"]
    verdict = classify_text(log + "\n")
    assert verdict.cause is Cause.SUCCESS and verdict.signature == "overflow-routine", verdict
    assert any(a.cause is Cause.NUMERICAL for a in verdict.alternatives), verdict.alternatives


def test_routine_overflow_never_hides_a_failure() -> None:
    crash = DS_STARTUP + "\nRuntimeError: CUDA error: an illegal memory access was encountered\n"
    assert classify_text(crash).cause is not Cause.SUCCESS
    # the scheduler says the job failed: a success finding cannot win
    assert classify_text(DS_STARTUP + "\n", SchedulerFacts(state="FAILED", exit_code=1)).cause is not Cause.SUCCESS


def test_overflow_down_to_a_small_scale_is_not_routine() -> None:
    log = "\n".join(f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {s}, reducing to {s // 2}"
                    for s in (256, 128, 64, 32))
    assert "overflow-routine" not in _sigs(log)


MMDET = ("2019-09-20 14:49:53,519 - INFO - Epoch [{e}][50/90]\tlr: 0.01517, eta: 0:02:14, time: 0.280, "
         "data_time: 0.008, memory: 4181, loss_cls: 0.0578, acc: 98.9102, loss: {x}")


def test_a_short_series_that_blows_up_by_orders_of_magnitude_is_numerical_never_success() -> None:
    """Three epochs are too few for a trend, but 0.36 -> 22.9 -> 3.1e9 is no healthy run's."""
    exploded = "\n".join(MMDET.format(e=e, x=x) for e, x in ((4, 0.3555), (5, 22.8777), (6, 3071627025.1418)))
    assert _sigs(exploded) == ["loss-diverged"]
    assert classify_text(exploded).cause is Cause.NUMERICAL
    # the same shape below the bounds is not a finding: a 100x rise, or a loss that ends small
    assert _sigs("\n".join(MMDET.format(e=e, x=x) for e, x in ((4, 0.35), (5, 2.2), (6, 35.0)))) == []
    assert _sigs("\n".join(MMDET.format(e=e, x=x) for e, x in ((4, 0.00001), (5, 0.00002), (6, 0.05)))) == []
    # a summed loss that starts huge and falls is a run learning
    assert _sigs("\n".join(MMDET.format(e=e, x=x) for e, x in ((4, 3.1e9), (5, 2.2e6), (6, 1.5e4)))) == []


def test_gradient_boosting_training_metric_series_is_read_as_the_loss() -> None:
    """XGBoost / LightGBM / CatBoost print their training objective per round, not `loss`: a
    training RMSE that climbs from 0.17 to the hundreds and stays there is divergence; one that
    falls is a run learning, and a validation metric or an AUC is never read as the loss."""
    rmse = (0.47, 0.28, 0.17, 26.6, 1039.7, 627.0, 441.2, 303.4, 1226.3, 1257.1, 897.3)
    xgb = "\n".join(f"[{i * 10}]\ttrain-rmse:{v}" for i, v in enumerate(rmse))
    assert _sigs(xgb) == ["loss-diverged"]
    assert classify_text(xgb).cause is Cause.NUMERICAL
    lgb = "\n".join(f"[{i * 10}]\ttraining's l2: {v}\tvalid_1's l2: {v}" for i, v in enumerate(rmse))
    assert _sigs(lgb) == ["loss-diverged"]
    cat = "\n".join(f"{i * 10}:\tlearn: {v}\ttest: {v}\tbest: 0.17 (20)" for i, v in enumerate(rmse))
    assert _sigs(cat) == ["loss-diverged"]
    falling = "\n".join(f"[{i * 10}]\ttrain-rmse:{0.5 / (i + 1):.4f}" for i in range(11))
    assert _sigs(falling) == []
    assert _sigs("\n".join(f"[{i * 10}]\tvalidation_0-rmse:{v}" for i, v in enumerate(rmse))) == []
    assert _sigs("\n".join(f"[{i * 10}]\ttrain-auc:{v}" for i, v in enumerate(rmse))) == []
