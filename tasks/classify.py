"""Classify a failed job from its evidence with the shared classifiers."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from classifiers import classify_files
from pitstop.models import Cause, Evidence, Verdict
from tasks.evidence import JobEvidence


@task(name="classify", cache_policy=NO_CACHE)
def classify_job(evidence: JobEvidence) -> Verdict:
    kernel = Path(evidence.kernel_log) if evidence.kernel_log else None
    try:
        return classify_files([Path(p) for p in evidence.log_paths], evidence.facts, kernel_log=kernel)
    except Exception as exc:  # a classifier bug must not lose the incident
        return Verdict(
            cause=Cause.UNKNOWN,
            signature="classifier-error",
            confidence=0.0,
            evidence=[Evidence(line=0, text=f"classifier failed: {exc}", source="pitstop")],
            hint="the classifier raised; see the flow run log",
        )
