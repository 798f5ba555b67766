"""Multi-pattern engines behind one small interface: which rules match in a window, and where.

`first_matches(window)` returns {rule index: offset of the first match in the window}. The offset
may be anywhere inside the matched text; callers only use it to find the line, and patterns never
span lines, so every engine lands on the same line. Engines, fastest first:

- Hyperscan: one compiled database, SIMD multi-pattern scan (Linux x86-64).
- RE2 Set: one linear-time pass says which rules match; `re` then locates only those.
- Python `re`: one search per rule; correct everywhere, slow on huge inputs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from classifiers.rule_model import Rule


class Engine(Protocol):
    name: str

    def first_matches(self, window: bytes | bytearray | memoryview) -> dict[int, int]: ...


def _python_regex(rule: Rule) -> re.Pattern[bytes]:
    flags = re.MULTILINE | (re.IGNORECASE if rule.caseless else 0)
    return re.compile(rule.pattern.encode(), flags)


class PythonReEngine:
    name = "re"

    def __init__(self, rules: Sequence[Rule]) -> None:
        self._regexes = [_python_regex(rule) for rule in rules]

    def first_matches(self, window: bytes | bytearray | memoryview) -> dict[int, int]:
        found: dict[int, int] = {}
        for index, regex in enumerate(self._regexes):
            match = regex.search(window)
            if match:
                found[index] = match.start()
        return found


class Re2SetEngine:
    name = "re2"

    def __init__(self, rules: Sequence[Rule]) -> None:
        import re2

        options = re2.Options()
        self._set = re2.Set.SearchSet(options)
        for rule in rules:
            prefix = "(?mi)" if rule.caseless else "(?m)"
            self._set.Add((prefix + rule.pattern).encode())
        self._set.Compile()
        self._regexes = [_python_regex(rule) for rule in rules]

    def first_matches(self, window: bytes | bytearray | memoryview) -> dict[int, int]:
        data = bytes(window) if not isinstance(window, bytes) else window
        found: dict[int, int] = {}
        for index in self._set.Match(data) or ():  # None when nothing matches
            match = self._regexes[index].search(data)
            if match:
                found[index] = match.start()
        return found


class HyperscanEngine:
    name = "hyperscan"

    def __init__(self, rules: Sequence[Rule]) -> None:
        import hyperscan

        self._hs = hyperscan
        base = hyperscan.HS_FLAG_SINGLEMATCH | hyperscan.HS_FLAG_MULTILINE
        expressions = [rule.pattern.encode() for rule in rules]
        flags = [base | (hyperscan.HS_FLAG_CASELESS if rule.caseless else 0) for rule in rules]
        cache = _db_cache_path(expressions, flags)
        self._db = _load_cached_db(hyperscan, cache)
        if self._db is None:
            # Compiling ~120 patterns costs ~0.3 s, more than scanning 100 MB: cache the result.
            self._db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            self._db.compile(expressions=expressions, ids=list(range(len(rules))), elements=len(rules), flags=flags)
            _store_db(hyperscan, self._db, cache)

    def first_matches(self, window: bytes | bytearray | memoryview) -> dict[int, int]:
        found: dict[int, int] = {}

        def on_match(rule_id: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            # `to` is one past the last matched byte; SINGLEMATCH reports each rule once.
            if rule_id not in found:
                found[rule_id] = max(to - 1, 0)

        if len(window):
            self._db.scan(window, match_event_handler=on_match)
        return found


def _db_cache_path(expressions: list[bytes], flags: list[int]):
    import hashlib
    import os
    from pathlib import Path

    import hyperscan

    key = hashlib.sha256(repr((getattr(hyperscan, "__version__", ""), expressions, flags)).encode()).hexdigest()[:24]
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pitstop"
    return root / f"hyperscan-{key}.db"


def _load_cached_db(hyperscan, path):
    """The cached database, or None if absent/corrupt/unreadable (then we simply compile)."""
    try:
        db = hyperscan.loadb(path.read_bytes(), mode=hyperscan.HS_MODE_BLOCK)
        db.scratch = hyperscan.Scratch(db)  # a deserialised database comes without scratch space
        db.scan(b"probe\n", match_event_handler=lambda *_: None)
        return db
    except Exception:  # noqa: BLE001 - any cache problem means: compile instead
        return None


def _store_db(hyperscan, db, path) -> None:
    import os

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(hyperscan.dumpb(db))
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the whole new one
    except OSError:
        pass  # read-only home etc.: the cache is only an optimisation


ENGINE_NAMES = ("hyperscan", "re2", "re")


def build_engine(rules: Sequence[Rule], prefer: str | None = None) -> Engine:
    """The fastest engine that loads here, or exactly `prefer` when given."""
    factories = {"hyperscan": HyperscanEngine, "re2": Re2SetEngine, "re": PythonReEngine}
    if prefer is not None:
        if prefer not in factories:
            raise ValueError(f"unknown classifier engine {prefer!r}; choose one of {ENGINE_NAMES}")
        return factories[prefer](rules)
    for name in ENGINE_NAMES:
        try:
            return factories[name](rules)
        except Exception:  # noqa: BLE001 - a missing/broken optional engine means: try the next
            continue
    return PythonReEngine(rules)
