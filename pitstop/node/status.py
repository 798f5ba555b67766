"""Combining check statuses, and the one error type every node parser raises."""

from __future__ import annotations

from collections.abc import Iterable

from pitstop.models import CheckStatus

# UNAVAILABLE says nothing about the node, so it ranks with OK when combining.
_RANK = {CheckStatus.OK: 0, CheckStatus.UNAVAILABLE: 0, CheckStatus.WARN: 1, CheckStatus.FAIL: 2}


class NodeParseError(ValueError):
    """Tool output that cannot be understood; the message names the tool and what was wrong."""


def worst(statuses: Iterable[CheckStatus], default: CheckStatus = CheckStatus.OK) -> CheckStatus:
    """The most severe of `statuses` as a verdict: OK, WARN or FAIL (UNAVAILABLE counts as OK)."""
    result = default
    for status in statuses:
        if _RANK[status] > _RANK[result]:
            result = status
    return CheckStatus.OK if result is CheckStatus.UNAVAILABLE else result
