"""Wires the classifier into `pitstop run`: the wrapper (core) never imports `classifiers`; this
composition-root module tells it which process classifies (pitstop/cli/classify_worker.py)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from pitstop.models import SchedulerFacts, Verdict

# The same interpreter as the wrapper, so the worker sees the same installed packages.
WORKER_ARGV = (sys.executable, "-m", "pitstop.cli.classify_worker")


def classify_logs(paths: Sequence[Path], facts: SchedulerFacts, timeout_s: float) -> Verdict:
    """The verdict over the complete logs; raises ClassifierTimedOut / ClassifierFailed."""
    from pitstop.wrapper.classify_child import classify_in_child

    return classify_in_child(WORKER_ARGV, paths, facts, timeout_s)


def start_classifier(follow: Sequence[Path] | None = None):
    """A classifier worker started now (while the job runs), scanning `follow` as they grow;
    called once the job has ended."""
    from pitstop.wrapper.classify_child import ClassifierProcess

    return ClassifierProcess(WORKER_ARGV, follow)
