"""The fault process follows the configured rates (statistical checks over seeds, not fixed outputs)."""

from __future__ import annotations

import math

from pitstop.simulate.engine import fault_arrivals

SEEDS = range(6)
# chi-square critical values at p = 0.001 by degrees of freedom (scipy.stats.chi2.ppf(0.999, df))
CHI2_999 = {16: 39.25, 17: 40.79, 18: 42.31}


def test_total_per_seed_is_poisson_around_the_configured_count(params) -> None:
    expected = sum(params.expected_count(c) for c in params.categories)
    assert expected == 419
    half_width = 3.29 * math.sqrt(expected)  # 99.9% normal approximation of Poisson(419)
    for seed in SEEDS:
        n = len(fault_arrivals(params, seed))
        assert abs(n - expected) < half_width, (seed, n)


def test_counts_per_category_fit_the_rates(params) -> None:
    observed = [0] * len(params.categories)
    for seed in SEEDS:
        for _, i, _, _ in fault_arrivals(params, seed):
            observed[i] += 1
    expected = [params.expected_count(c) * len(SEEDS) for c in params.categories]
    assert min(expected) >= 5  # the chi-square approximation holds
    chi2 = sum((o - e) ** 2 / e for o, e in zip(observed, expected))
    assert chi2 < CHI2_999[len(expected) - 1], (chi2, dict(zip((c.name for c in params.categories), observed)))


def test_hidden_needs_follow_their_probabilities(params) -> None:
    faulty = next(i for i, c in enumerate(params.categories) if c.name == "faulty_gpu")
    needs = [need for seed in SEEDS for _, i, _, need in fault_arrivals(params, seed) if i == faulty]
    share = sum(1 for n in needs if n.value == "replace") / len(needs)
    p = params.categories[faulty].need[next(k for k in params.categories[faulty].need if k.value == "replace")]
    assert abs(share - p) < 3.29 * math.sqrt(p * (1 - p) / len(needs))


def test_same_seed_same_faults_other_seed_other_faults(params) -> None:
    assert fault_arrivals(params, 7) == fault_arrivals(params, 7)
    assert fault_arrivals(params, 7) != fault_arrivals(params, 8)
