"""The classifier behind `pitstop run` / `pitstop runs show`, for the CLI's callers.

The wrapper (core) starts its classifier worker itself (pitstop.wrapper.supervise.worker_argv,
the process pitstop/cli/classify_worker.py); nothing in core imports this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pitstop.models import SchedulerFacts, Verdict
from pitstop.wrapper.supervise import worker_argv

# The same interpreter as the wrapper, so the worker sees the same installed packages.
WORKER_ARGV = worker_argv()


def classify_logs(paths: Sequence[Path], facts: SchedulerFacts, timeout_s: float) -> Verdict:
    """The verdict over the complete logs; raises ClassifierTimedOut / ClassifierFailed."""
    from pitstop.wrapper.classify_child import classify_in_child

    return classify_in_child(WORKER_ARGV, paths, facts, timeout_s)


def start_classifier(follow: Sequence[Path] | None = None):
    """A classifier worker started now (while the job runs), scanning `follow` as they grow;
    called once the job has ended."""
    from pitstop.wrapper.classify_child import ClassifierProcess

    return ClassifierProcess(WORKER_ARGV, follow)
