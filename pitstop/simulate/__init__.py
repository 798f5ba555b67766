"""Goodput simulation: what Pitstop's policy does to a large synchronous training run.

    params = load_params()                       # the Llama 3 defaults (llama3.yaml), or a file
    result = compare(params, load_policy(), classify)   # classify: LogSample -> Verdict
    result.by_name("act").ettr

Pure core: it calls `pitstop.policy` (decide, History, the escalation functions) but never the
classifier itself; the caller passes `classify` (pitstop/cli/cmd_simulate.py uses
`classifiers.classify_text`, cached per distinct log line).
"""

from pitstop.simulate.compare import compare
from pitstop.simulate.evidence import LogSample, sample_for
from pitstop.simulate.params import SimParams, load_params
from pitstop.simulate.results import Comparison, StrategyResult
from pitstop.simulate.strategies import STRATEGIES, never_exclude

__all__ = [
    "Comparison",
    "LogSample",
    "STRATEGIES",
    "SimParams",
    "StrategyResult",
    "compare",
    "load_params",
    "never_exclude",
    "sample_for",
]
