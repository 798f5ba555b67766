"""Wires the classifier into `pitstop run`: the wrapper (core) takes a callable and never
imports `classifiers` itself; this composition-root module supplies it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pitstop.models import SchedulerFacts, Verdict


def classify_logs(paths: Sequence[Path], facts: SchedulerFacts) -> Verdict:
    from classifiers import classify_files

    return classify_files(list(paths), facts=facts)
