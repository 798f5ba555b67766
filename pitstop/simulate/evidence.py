"""What each fault category shows: the job log and kernel log lines, rendered once per category.

The simulation core never imports the classifier (core <- classifiers): the caller hands it a
`Classify` callable, and the composition layer (pitstop/cli/cmd_simulate.py) backs it with
`classifiers.classify_text`. The lines are rendered for one stand-in node, so every interruption
of a category is the same text and one verdict per category is enough.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from pitstop.cluster.demo_faults import FAULTS_BY_NAME
from pitstop.models import Verdict
from pitstop.simulate.params import Category

# Values for the demo lines' placeholders ({node}, {rank}, ...): any plausible ones do.
_PLACEHOLDERS = dict(job="4242", node="gpu0001", rank=37, pci="0000:3b:00", pid=4242, ts="86400.5", peer="10.0.3.7")


class LogSample(BaseModel):
    """One interruption's evidence, as the flows hand it to the classifier."""

    model_config = ConfigDict(frozen=True)

    log: str
    kernel: str | None = None
    job_state: str = "FAILED"
    exit_code: int = 1


Classify = Callable[[LogSample], Verdict]


def sample_for(category: Category) -> LogSample:
    ev = category.evidence
    if ev.demo_fault is not None:
        fault = FAULTS_BY_NAME.get(ev.demo_fault)
        if fault is None:
            raise ValueError(f"category {category.name}: no demo fault {ev.demo_fault!r}; "
                             f"known: {', '.join(sorted(FAULTS_BY_NAME))}")
        log_lines, kernel_lines, state, code = fault.log_lines, fault.kernel_lines, fault.job_state, fault.exit_code
    else:
        log_lines, kernel_lines, state, code = ev.log_lines, ev.kernel_lines, ev.job_state, ev.exit_code
    render = lambda lines: "\n".join(line.format(**_PLACEHOLDERS) for line in lines)  # noqa: E731
    return LogSample(log=render(log_lines), kernel=render(kernel_lines) or None, job_state=state, exit_code=code)


def verdicts(categories: list[Category], classify: Classify) -> dict[str, Verdict]:
    """One verdict per category (the per-event path only looks it up)."""
    return {c.name: classify(sample_for(c)) for c in categories}
