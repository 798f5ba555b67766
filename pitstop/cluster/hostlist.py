"""Slurm hostlist expressions: `gpu[01-04,07],login1` <-> a list of node names. Pure functions.

Supported: comma lists, several ranges per bracket, zero padding (taken from the range's lower
bound, as Slurm does), a prefix and suffix around the bracket, and several bracket groups in one
name (`r[1-2]n[01-02]`, expanded as a cartesian product). Nested brackets are not Slurm syntax.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import product

# An expression from a broken tool or a typo like gpu[1-99999999] must not eat the memory.
MAX_HOSTS = 100_000

_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)(\D*)$")
_NAME_CHARS = re.compile(r"^[A-Za-z0-9._-]*$")


class HostlistError(ValueError):
    """A hostlist expression that cannot be read; the message quotes the bad part."""


def expand(expression: str, max_hosts: int = MAX_HOSTS) -> list[str]:
    """`gpu[01-03],cpu1` -> ['gpu01', 'gpu02', 'gpu03', 'cpu1']. Duplicates kept, order kept."""
    if not isinstance(expression, str):
        raise HostlistError(f"hostlist must be text, got {type(expression).__name__}")
    text = expression.strip()
    if not text:
        return []
    hosts: list[str] = []
    for item in _split_top_level(text):
        if not item:
            raise HostlistError(f"empty name in hostlist {expression!r} (doubled or trailing comma?)")
        hosts.extend(_expand_item(item, expression, max_hosts - len(hosts)))
    return hosts


def compress(names: Iterable[str]) -> str:
    """['gpu01', 'gpu02', 'gpu04', 'login1'] -> 'gpu[01-02,04],login1'. Duplicates dropped.

    Groups appear in order of their first name; numbers within a group are sorted.
    """
    groups: dict[tuple[str, str], list[tuple[int, str]]] = {}
    plain: dict[str, None] = {}
    order: list[tuple[str, str] | str] = []
    for name in names:
        if not isinstance(name, str) or not name or not _NAME_CHARS.match(name):
            raise HostlistError(f"cannot compress node name {name!r}")
        match = _TRAILING_NUMBER.match(name)
        if not match:
            if name not in plain:
                plain[name] = None
                order.append(name)
            continue
        key = (match.group(1), match.group(3))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append((int(match.group(2)), match.group(2)))
    parts: list[str] = []
    for entry in order:
        if isinstance(entry, str):
            parts.append(entry)
            continue
        prefix, suffix = entry
        for width, numbers in _by_width(groups[entry]).items():
            ranges = _ranges(sorted(set(numbers)), width)
            if len(ranges) == 1 and "-" not in ranges[0]:
                parts.append(f"{prefix}{ranges[0]}{suffix}")
            else:
                parts.append(f"{prefix}[{','.join(ranges)}]{suffix}")
    return ",".join(parts)


def _split_top_level(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested '[' at position {i} in hostlist {text!r}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"']' without '[' at position {i} in hostlist {text!r}")
        elif char == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    if depth != 0:
        raise HostlistError(f"unclosed '[' in hostlist {text!r}")
    items.append(text[start:].strip())
    return items


def _expand_item(item: str, expression: str, budget: int) -> list[str]:
    # literal pieces and bracket bodies alternate: 'r', '1-2', 'n', '01-02', ''
    pieces = re.split(r"\[([^\]]*)\]", item)
    literals, ranges = pieces[0::2], pieces[1::2]
    for literal in literals:
        if not _NAME_CHARS.match(literal):
            raise HostlistError(f"unexpected character in {item!r} of hostlist {expression!r}")
    choices = [_expand_range_list(body, expression) for body in ranges]
    count = 1
    for options in choices:
        count *= len(options)
    if count > budget:
        raise HostlistError(
            f"hostlist {expression!r} expands to more than {MAX_HOSTS} names; refusing"
        )
    names = []
    for combo in product(*choices):
        name = literals[0] + "".join(num + lit for num, lit in zip(combo, literals[1:]))
        if not name:
            raise HostlistError(f"empty name in hostlist {expression!r}")
        names.append(name)
    return names


def _expand_range_list(body: str, expression: str) -> list[str]:
    if not body.strip():
        raise HostlistError(f"empty brackets in hostlist {expression!r}")
    out: list[str] = []
    for part in body.split(","):
        part = part.strip()
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match:
            raise HostlistError(
                f"bad range {part!r} in hostlist {expression!r} (expected N or N-M with digits)"
            )
        low_text, high_text = match.group(1), match.group(2) or match.group(1)
        low, high = int(low_text), int(high_text)
        if high < low:
            raise HostlistError(f"range {part!r} runs backwards in hostlist {expression!r}")
        if high - low >= MAX_HOSTS:
            raise HostlistError(
                f"range {part!r} in hostlist {expression!r} has more than {MAX_HOSTS} names"
            )
        width = len(low_text)
        out.extend(f"{n:0{width}d}" for n in range(low, high + 1))
    return out


def _by_width(numbers: list[tuple[int, str]]) -> dict[int, list[int]]:
    """Split a group by zero padding: 'gpu01' (width 2) and 'gpu1' (width 1) differ.

    A number is formatted with its own digit count, so 9 and 10 (widths 1 and 2, no leading
    zero) can share a range 9-10; padded numbers only share ranges of their own width.
    """
    padded_widths = {len(text) for _, text in numbers if text.startswith("0") and len(text) > 1}
    out: dict[int, list[int]] = {}
    for value, text in numbers:
        padded = text.startswith("0") and len(text) > 1
        width = len(text) if padded or len(text) in padded_widths else 0
        out.setdefault(width, []).append(value)
    return out


def _ranges(values: list[int], width: int) -> list[str]:
    def fmt(n: int) -> str:
        return f"{n:0{width}d}" if width else str(n)

    out, i = [], 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        out.append(fmt(values[i]) if i == j else f"{fmt(values[i])}-{fmt(values[j])}")
        i = j + 1
    return out
