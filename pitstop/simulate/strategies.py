"""The four ways of running the cluster that one simulation compares, as a table.

- no automation: a human notices the dead job (late at night), reads the logs, restarts it;
- Pitstop observe: Pitstop decides and pages; a human carries out the plan it sent;
- Pitstop act: Pitstop carries out its own plan; humans only answer approvals and notifications;
- a bad policy in act mode: the same policy with every node step removed and the requeue told
  not to exclude the failed node, so the guards that remain (the retry limit) show what they stop.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from pitstop.config import Mode
from pitstop.policy.model import ActionKind, ActionTemplate, Policy

# Steps a "never exclude" policy keeps: it still requeues and tells people, nothing else.
_KEPT = frozenset({ActionKind.REQUEUE, ActionKind.NOTIFY_USER, ActionKind.NOTIFY_OPS, ActionKind.NONE})


def never_exclude(policy: Policy) -> Policy:
    """The policy with no node steps, and requeues that put the job back on the same nodes."""

    def strip(actions: list[ActionTemplate]) -> list[ActionTemplate]:
        kept = [a.model_copy(update={"exclude_faulty_nodes": False}) if a.kind is ActionKind.REQUEUE else a
                for a in actions if a.kind in _KEPT]
        return kept or [ActionTemplate(kind=ActionKind.NOTIFY_OPS)]

    return policy.model_copy(update={
        "rules": [r.model_copy(update={"actions": strip(r.actions)}) for r in policy.rules],
        "xid_buckets": {k: p.model_copy(update={"actions": strip(p.actions)}) for k, p in policy.xid_buckets.items()},
    })


def _same(policy: Policy) -> Policy:
    return policy


class Strategy(BaseModel):
    name: str
    label: str
    mode: Mode | None  # None: no Pitstop at all
    policy: Callable[[Policy], Policy] = _same


STRATEGIES: tuple[Strategy, ...] = (
    Strategy(name="no_automation", label="no automation", mode=None),
    Strategy(name="observe", label="observe", mode=Mode.OBSERVE),
    Strategy(name="act", label="act", mode=Mode.ACT),
    Strategy(name="bad_policy", label="act, bad policy", mode=Mode.ACT, policy=never_exclude),
)
STRATEGY_NAMES = tuple(s.name for s in STRATEGIES)


def strategies(names: list[str] | None = None) -> list[Strategy]:
    if not names:
        return list(STRATEGIES)
    unknown = [n for n in names if n not in STRATEGY_NAMES]
    if unknown:
        raise ValueError(f"unknown strategy {', '.join(unknown)}; known: {', '.join(STRATEGY_NAMES)}")
    return [s for s in STRATEGIES if s.name in names]
