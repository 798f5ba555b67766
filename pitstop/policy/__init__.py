"""Remediation policy: decisions are data (model + YAML), a pure `decide()`, pure safety guards.

Flows use:
    policy = load_policy(settings.policy.file)
    decision = decide(verdict, policy=policy, history=history, mode=mode_state, now=now, ...)
"""

from pitstop.policy.decide import Decision, PlannedAction, decide
from pitstop.policy.history import History
from pitstop.policy.model import ActionKind, Policy, PolicyError, load_policy, parse_policy
from pitstop.policy.safety import Block, ModeState, ownership_reason

__all__ = [
    "ActionKind",
    "Block",
    "Decision",
    "History",
    "ModeState",
    "PlannedAction",
    "Policy",
    "PolicyError",
    "decide",
    "load_policy",
    "ownership_reason",
    "parse_policy",
]
