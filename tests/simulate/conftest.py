"""Shared runs: the default comparison for a few seeds is computed once per test session."""

from __future__ import annotations

import pytest

from pitstop.cli.cmd_simulate import make_classifier
from pitstop.policy.model import load_policy
from pitstop.simulate import compare, load_params

SEEDS = (0, 1, 2)


@pytest.fixture(scope="session")
def classify():
    return make_classifier()


@pytest.fixture(scope="session")
def params():
    return load_params()


@pytest.fixture(scope="session")
def default_runs(params, classify):
    """seed -> Comparison of the four strategies with the built-in default policy."""
    policy = load_policy()
    return {seed: compare(params, policy, classify, seed=seed) for seed in SEEDS}
