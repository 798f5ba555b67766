"""What a valid identifier from outside looks like (Slurm's hook environment, event payloads),
and how any outside text is made safe for a one-line log.

Standard library `re` only: the Slurm hooks import this on every job end. The node and job
patterns are also the ones `pitstop.cluster.base` validates scheduler arguments with (it
imports them from here). Always `fullmatch`: `$` also matches
before a trailing newline, so 'gpu01\\n' would pass a `match(...$)`.
"""

from __future__ import annotations

import re

# kind -> pattern. Slurm job ids: 123, 123_4 (array task), 123+1 (het component); node names:
# letters, digits, '-', '_', '.'; cluster names are Slurm's ClusterName; user names are POSIX
# (plus '@' and '.' for directory-service accounts), never '/', '?', '&' or ':' (they end up
# inside apprise URLs such as mailto://...?to={user}@example.org).
PATTERNS: dict[str, re.Pattern[str]] = {
    "job id": re.compile(r"[0-9]{1,12}(?:[_+][0-9]{1,9})?"),
    "node name": re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"),
    "cluster name": re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"),
    "user name": re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}"),
}

SHOWN_CHARS = 80  # how much of a rejected value a log line repeats

# C0 and C1 controls, DEL, and the Unicode line/paragraph separators: each would let outside
# text start a new line (or redraw the terminal) in a log that is read one line per record.
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_CONTROL.update({0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r", 0x2028: "\\u2028", 0x2029: "\\u2029"})
_ESCAPES = str.maketrans({chr(c): text for c, text in _CONTROL.items()} | {"\\": "\\\\"})


class InvalidId(ValueError):
    """An identifier that is not what its kind looks like; the message shows it escaped."""


def is_valid(kind: str, value: object) -> bool:
    return isinstance(value, str) and PATTERNS[kind].fullmatch(value) is not None


def check(kind: str, value: object) -> str:
    """`value` if it is a valid `kind`, else InvalidId naming it (escaped, bounded)."""
    if not is_valid(kind, value):
        raise InvalidId(f"{shown(value)} is not a valid {kind}")
    return value  # type: ignore[return-value]


def escape_controls(text: str) -> str:
    """One line whatever the input: control characters (and backslash) written as escapes."""
    return text.translate(_ESCAPES)


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """An outside value as a log line may quote it: escaped, bounded, in quotes."""
    text = escape_controls(str(value))
    return "'" + (text if len(text) <= limit else text[: limit - 1] + "…") + "'"
