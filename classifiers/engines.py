"""Multi-pattern engines behind one small interface: which rules match in a window, and where.

`first_matches(window, skip)` returns {rule index: offset of the first match in the window},
ignoring the rules in `skip` (the scanner skips weak rules it has already found: scanning for
them again cannot change the verdict, and they are the ones that match on every line).
`last_matches(indices, data, end)` gives, for each of those rules, an offset inside its last
match in data[:end].

Offsets may be anywhere inside the matched text; callers only use them to find the line, and
patterns never span lines, so every engine lands on the same line. Engines, fastest first:

- Hyperscan: one compiled database, SIMD multi-pattern scan (Linux x86-64). Releases the GIL
  while scanning, so windows can be scanned on several threads (each with its own scratch).
- RE2 Set: one linear-time pass says which rules match; `re` then locates only those.
- Python `re`: one search per rule; correct everywhere, slow on huge inputs.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence
from typing import Protocol, Union

from classifiers.rule_model import Rule

Buffer = Union[bytes, bytearray, memoryview]
NO_SKIP: frozenset[int] = frozenset()
_TAIL_START = 64 * 1024  # last-match search looks at tails of this size, then 4x larger ones
# Rules this weak (success/progress) match nearly every line: their last occurrence is not
# evidence, and once found the scanner stops looking for them.
LAST_MIN_PRIORITY = 10


class Engine(Protocol):
    name: str

    def first_matches(self, window: Buffer, skip: frozenset[int] = NO_SKIP) -> dict[int, int]: ...

    def last_matches(self, indices: frozenset[int], data: bytes | bytearray, end: int) -> dict[int, int]: ...


def _python_regex(rule: Rule) -> re.Pattern[bytes]:
    flags = re.MULTILINE | (re.IGNORECASE if rule.caseless else 0)
    return re.compile(rule.pattern.encode(), flags)


def _tail_search(data: bytes | bytearray, end: int, wanted: frozenset[int], last_in) -> dict[int, int]:
    """Last match of each wanted rule in data[:end], searching whole-line tails of growing size.

    `last_in(lo, hi)` -> {rule: offset of its last match in data[lo:hi]}. The last match is
    almost always near the end of a window, so most calls look at only 64 KiB.
    """
    size = _TAIL_START
    while True:
        lo = max(end - size, 0)
        lo = data.rfind(b"\n", 0, lo) + 1 if lo else 0  # start on a line start: ^ and \b stay right
        found = last_in(lo, end)
        if lo == 0 or wanted <= found.keys():
            return {index: offset for index, offset in found.items() if index in wanted}
        size *= 4


def _re_last(regexes: Sequence[re.Pattern[bytes]], wanted: frozenset[int], data: bytes | bytearray, end: int) -> dict[int, int]:
    def last_in(lo: int, hi: int) -> dict[int, int]:
        found: dict[int, int] = {}
        for index in wanted:
            for match in regexes[index].finditer(data, lo, hi):
                found[index] = match.start()
        return found

    return _tail_search(data, end, wanted, last_in)


class PythonReEngine:
    name = "re"

    def __init__(self, rules: Sequence[Rule]) -> None:
        self._regexes = [_python_regex(rule) for rule in rules]

    def first_matches(self, window: Buffer, skip: frozenset[int] = NO_SKIP) -> dict[int, int]:
        found: dict[int, int] = {}
        for index, regex in enumerate(self._regexes):
            if index in skip:
                continue
            match = regex.search(window)
            if match:
                found[index] = match.start()
        return found

    def last_matches(self, indices: frozenset[int], data: bytes | bytearray, end: int) -> dict[int, int]:
        return _re_last(self._regexes, indices, data, end)


RE2_MAX_MEM = 64 << 20


class Re2SetEngine:
    name = "re2"

    def __init__(self, rules: Sequence[Rule]) -> None:
        import re2

        options = re2.Options()
        # RE2's default budget (8 MiB) holds the built-in table with no room for one more bounded
        # repeat such as `[^\n]{0,60}`, and a site rule file adds rows: compiling the set would fail.
        options.max_mem = RE2_MAX_MEM
        self._set = re2.Set.SearchSet(options)
        for rule in rules:
            prefix = "(?mi)" if rule.caseless else "(?m)"
            self._set.Add((prefix + rule.pattern).encode())
        self._set.Compile()
        self._regexes = [_python_regex(rule) for rule in rules]

    def first_matches(self, window: Buffer, skip: frozenset[int] = NO_SKIP) -> dict[int, int]:
        data = bytes(window) if not isinstance(window, bytes) else window
        found: dict[int, int] = {}
        for index in self._set.Match(data) or ():  # None when nothing matches
            if index in skip:
                continue
            match = self._regexes[index].search(data)
            if match:
                found[index] = match.start()
        return found

    def last_matches(self, indices: frozenset[int], data: bytes | bytearray, end: int) -> dict[int, int]:
        return _re_last(self._regexes, indices, data, end)


class HyperscanEngine:
    """Databases compiled on first use and cached on disk, scratch space per thread and database.

    - one SINGLEMATCH database per set of skipped rules, for `first_matches`;
    - one all-matches database for `last_matches`, built from the rules that can be asked about.
    """

    name = "hyperscan"

    def __init__(self, rules: Sequence[Rule], last_rules: frozenset[int] | None = None) -> None:
        import hyperscan

        self._hs = hyperscan
        self._rules = tuple(rules)
        # Rules matching every line (progress markers) stay out of the all-matches database:
        # there they would call back into Python once per line.
        if last_rules is None:
            last_rules = frozenset(i for i, rule in enumerate(self._rules) if rule.priority >= LAST_MIN_PRIORITY)
        self._last_rules = sorted(last_rules)
        self._lock = threading.Lock()  # guards the lazily built databases below
        self._local = threading.local()
        self._dbs: dict[frozenset[int], object] = {}
        self._last_db = None
        self._dbs[NO_SKIP] = self._database(range(len(self._rules)), single_match=True)

    def _database(self, indices, single_match: bool):
        hs = self._hs
        indices = list(indices)
        base = hs.HS_FLAG_MULTILINE | (hs.HS_FLAG_SINGLEMATCH if single_match else 0)
        expressions = [self._rules[i].pattern.encode() for i in indices]
        flags = [base | (hs.HS_FLAG_CASELESS if self._rules[i].caseless else 0) for i in indices]
        full = indices == list(range(len(self._rules)))
        cache = _db_cache_path(expressions, flags, None if full else indices)
        db = _load_cached_db(hs, cache)
        if db is None:
            # Compiling ~120 patterns costs ~0.3 s, more than scanning 100 MB: cache the result.
            db = hs.Database(mode=hs.HS_MODE_BLOCK)
            db.compile(expressions=expressions, ids=indices, elements=len(indices), flags=flags)
            _store_db(hs, db, cache)
        return db

    def _db_for(self, skip: frozenset[int]):
        db = self._dbs.get(skip)
        if db is None:
            with self._lock:
                db = self._dbs.get(skip)
                if db is None:
                    keep = [i for i in range(len(self._rules)) if i not in skip]
                    db = self._dbs[skip] = self._database(keep, single_match=True) if keep else None
        return db

    def _all_matches_db(self):
        if self._last_db is None:
            with self._lock:
                if self._last_db is None:
                    self._last_db = self._database(self._last_rules, single_match=False)
        return self._last_db

    def _scratch(self, db):
        per_thread = getattr(self._local, "scratch", None)
        if per_thread is None:
            per_thread = self._local.scratch = {}
        scratch = per_thread.get(id(db))
        if scratch is None:
            scratch = per_thread[id(db)] = self._hs.Scratch(db)
        return scratch

    def first_matches(self, window: Buffer, skip: frozenset[int] = NO_SKIP) -> dict[int, int]:
        found: dict[int, int] = {}

        def on_match(rule_id: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            # `to` is one past the last matched byte; SINGLEMATCH reports each rule once.
            if rule_id not in found:
                found[rule_id] = max(to - 1, 0)

        db = self._db_for(frozenset(skip))
        if len(window) and db is not None:
            db.scan(window, match_event_handler=on_match, scratch=self._scratch(db))
        return found

    def last_matches(self, indices: frozenset[int], data: bytes | bytearray, end: int) -> dict[int, int]:
        outside = [i for i in indices if i not in self._last_rules]
        if outside:
            raise ValueError(f"rules {outside} were left out of the last-match database")
        db = self._all_matches_db()
        scratch = self._scratch(db)

        def last_in(lo: int, hi: int) -> dict[int, int]:
            found: dict[int, int] = {}

            def on_match(rule_id: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
                found[rule_id] = lo + to - 1  # reported in increasing order of `to`

            if hi > lo:
                with memoryview(data) as view, view[lo:hi] as region:
                    db.scan(region, match_event_handler=on_match, scratch=scratch)
            return found

        return _tail_search(data, end, indices, last_in)


def _db_cache_path(expressions: list[bytes], flags: list[int], ids: list[int] | None = None):
    import hashlib
    import os
    from pathlib import Path

    import hyperscan

    key_parts = (getattr(hyperscan, "__version__", ""), expressions, flags)
    if ids is not None:  # a subset database: its ids are part of what it reports
        key_parts = (*key_parts, ids)
    key = hashlib.sha256(repr(key_parts).encode()).hexdigest()[:24]
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pitstop"
    return root / f"hyperscan-{key}.db"


def _load_cached_db(hyperscan, path):
    """The cached database, or None if absent/corrupt/unreadable (then we simply compile)."""
    try:
        db = hyperscan.loadb(path.read_bytes(), mode=hyperscan.HS_MODE_BLOCK)
        db.scratch = hyperscan.Scratch(db)  # a deserialised database comes without scratch space
        db.scan(b"probe\n", match_event_handler=lambda *_: None)
    except Exception:  # noqa: BLE001 - any cache problem means: compile instead
        return None
    try:
        os.utime(path)  # mark as recently used: eviction drops the least recently used
    except OSError:
        pass
    return db


CACHE_KEEP = 48  # databases kept on disk: several rule-table versions' worth (each has a few subsets)


def _evict_old(root, keep: int = CACHE_KEEP) -> None:
    """Drop the least recently used databases beyond `keep`: every rule edit makes new ones."""
    try:
        entries = sorted(root.glob("hyperscan-*"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return
    for stale in entries[keep:]:
        try:
            stale.unlink()
        except OSError:
            pass  # already gone (a concurrent eviction) or not ours to remove


def _store_db(hyperscan, db, path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(hyperscan.dumpb(db))
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the whole new one
    except OSError:
        return  # read-only home etc.: the cache is only an optimisation
    _evict_old(path.parent)


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
