"""Read PyTorch's NCCL flight-recorder dumps and name the ranks that lag their process group.

With TORCH_NCCL_TRACE_BUFFER_SIZE>0 (TORCH_FR_BUFFER_SIZE in newer releases) and
TORCH_NCCL_DUMP_ON_TIMEOUT=1, every rank writes one dump when a collective times out, to
<TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank> (TORCH_FR_DUMP_TEMP_FILE; default /tmp/nccl_trace_rank_).
The dump is torch's own pickle of plain data (no class tags), or the same keys as JSON from the
JSON dump API (torch/csrc/distributed/c10d/FlightRecorder.hpp, FlightRecorderDetail.hpp, format
2.x up to 2.10):

    version, comm_lib_version (nccl_version before 2.7),
    pg_config  {group name: {name, desc, ranks: "[0, 1, 2]"}},
    pg_status  {pg_id: {last_enqueued_collective, last_started_collective, last_completed_collective}},
    entries    [{record_id, pg_id, process_group: (name, desc), collective_seq_id, p2p_seq_id,
                 op_id, profiling_name, time_created_ns, state: scheduled|started|completed,
                 is_p2p, retired, timeout_ms, ...}]

The dumping rank is the number that ends the file name, as in PyTorch's
tools/flight_recorder/components/loader.py.

Pickles are loaded by an unpickler that builds builtin containers and scalars only: any other
global (os.system, builtins.eval, ...) is refused before it is imported, so a hostile file can
never run code. Bad, truncated or missing dumps become notes, never exceptions.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

MAX_DUMP_BYTES = 64 * 1024 * 1024  # a 2000-entry dump with stack traces is a few MiB
MAX_ENTRIES = 100_000  # entries read per dump; the ring buffer holds 2000 by default
MAX_DUMP_FILES = 100_000  # files discover_flight_recorder_dumps returns at most
DEFAULT_PREFIX = "nccl_trace_rank_"
_TRAILING_RANK = re.compile(r"(\d+)$")
_RANKS_TEXT = re.compile(r"-?\d+")


class FlightRecorderError(ValueError):
    """A dump that cannot be read: the message names the file and why."""


# --- loading ------------------------------------------------------------------------------------


def _tag_passthrough(value: object, _type_annotation: object = None) -> object:
    return value  # torch's restore_type_tag only re-attaches a TorchScript type: data unchanged


# The globals a flight-recorder pickle may name, each mapped to a local, side-effect-free
# stand-in (torch is never imported). torch writes dumps without type tags or specialised lists,
# but other writers of the same format may add them; everything else is refused.
_SAFE_GLOBALS: dict[tuple[str, str], object] = {
    ("torch.jit._pickle", "restore_type_tag"): _tag_passthrough,
    ("torch.jit._pickle", "build_intlist"): list,
    ("torch.jit._pickle", "build_doublelist"): list,
    ("torch.jit._pickle", "build_boollist"): list,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
}


class _PlainDataUnpickler(pickle.Unpickler):
    """Builds only builtin containers and scalars; refuses every other global by name."""

    def find_class(self, module: str, name: str) -> object:
        safe = _SAFE_GLOBALS.get((module, name))
        if safe is None:
            raise FlightRecorderError(
                f"refusing {module}.{name}: flight-recorder dumps hold plain data only"
            )
        return safe

    def persistent_load(self, pid: object) -> object:
        raise FlightRecorderError("refusing a persistent id: flight-recorder dumps hold plain data only")


def restricted_loads(data: bytes) -> object:
    """Unpickle plain data (dict, list, tuple, str, int, float, bool, None); refuse anything else."""
    return _PlainDataUnpickler(io.BytesIO(data)).load()


def _read_capped(path: Path, max_bytes: int) -> bytes:
    try:
        if path.exists() and not (path.is_file() or path.is_dir()):
            raise FlightRecorderError(f"{path}: not a regular file (a pipe or device would block): skipped")
        with open(path, "rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            if size > max_bytes:
                raise FlightRecorderError(f"{path}: {size} bytes, over the {max_bytes}-byte limit for a dump")
            return stream.read(max_bytes + 1)
    except FlightRecorderError:
        raise
    except IsADirectoryError as exc:
        raise FlightRecorderError(f"{path}: a directory, not a dump") from exc
    except FileNotFoundError as exc:
        raise FlightRecorderError(f"{path}: no such file") from exc
    except OSError as exc:
        raise FlightRecorderError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def _decode(data: bytes, path: Path) -> object:
    if not data.strip():
        raise FlightRecorderError(f"{path}: empty file")
    if data.lstrip()[:1] == b"{":  # the JSON dump API
        try:
            return json.loads(data.decode("utf-8", errors="replace"))
        except (ValueError, RecursionError) as exc:
            raise FlightRecorderError(f"{path}: not valid JSON ({str(exc)[:200]})") from exc
    try:
        return restricted_loads(data)
    except FlightRecorderError as exc:
        raise FlightRecorderError(f"{path}: {exc}") from None
    except Exception as exc:  # truncated or corrupt pickles raise anything from EOFError to KeyError
        raise FlightRecorderError(f"{path}: not a readable dump ({type(exc).__name__}: {str(exc)[:200]})") from None


def load_dump(path: Path | str, *, max_bytes: int = MAX_DUMP_BYTES) -> dict:
    """The raw dump as a dict. Raises FlightRecorderError (naming the file) for anything else."""
    path = Path(path)
    raw = _decode(_read_capped(path, max_bytes), path)
    if not isinstance(raw, dict):
        raise FlightRecorderError(f"{path}: a dump is a dict, this file holds a {type(raw).__name__}")
    return raw


# --- one rank's view ----------------------------------------------------------------------------


class Progress(BaseModel):
    """How far one rank got in one process group, as collective sequence numbers (-1: none)."""

    model_config = ConfigDict(frozen=True)

    enqueued: int = -1
    started: int | None = Field(default=None, description="None: not recorded by this source")
    completed: int = -1


class GroupView(BaseModel):
    """One process group as one rank's dump saw it."""

    name: str
    desc: str = ""
    ranks: list[int] = Field(default_factory=list, description="global ranks, from pg_config")
    from_entries: Progress | None = None
    from_status: Progress | None = None
    ops: dict[int, str] = Field(default_factory=dict, description="collective seq -> profiling_name")
    p2p_only: bool = False


class RankDump(BaseModel):
    rank: int
    source: str
    version: str = ""
    groups: dict[str, GroupView] = Field(default_factory=dict)


def rank_from_path(path: Path | str) -> int | None:
    """The rank a dump belongs to: the number that ends its file name (`nccl_trace_rank_5` -> 5)."""
    match = _TRAILING_RANK.search(Path(path).name)
    return int(match.group(1)) if match else None


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d{1,19}\s*", value):
        return int(value)  # the JSON dump writes pg_status numbers as strings
    return None


def _ranks(value: object) -> list[int]:
    if isinstance(value, str):  # torch writes "[0, 1, 2]"; parsed, never evaluated
        return [int(n) for n in _RANKS_TEXT.findall(value[:1_000_000])]
    if isinstance(value, (list, tuple)):
        return [n for n in map(_int, value[:1_000_000]) if n is not None]
    return []


def _group_names(pg_config: object) -> dict[str, GroupView]:
    groups: dict[str, GroupView] = {}
    if not isinstance(pg_config, dict):
        return groups
    for key, info in list(pg_config.items())[:10_000]:
        info = info if isinstance(info, dict) else {}
        name = str(info.get("name", key))[:200]
        groups[name] = GroupView(name=name, desc=str(info.get("desc", ""))[:200], ranks=_ranks(info.get("ranks")))
    return groups


def _process_group(entry: dict) -> tuple[str, str] | None:
    pg = entry.get("process_group")
    if isinstance(pg, (list, tuple)) and len(pg) == 2:
        return str(pg[0])[:200], str(pg[1])[:200]
    return None


def _is_p2p(entry: dict) -> bool:
    flag = entry.get("is_p2p")
    if isinstance(flag, bool):
        return flag
    name = str(entry.get("profiling_name", ""))  # dumps before is_p2p existed: nccl:send / nccl:recv
    return name.endswith(("send", "recv"))


class _EntryTally:
    """Running maxima of one group's collective entries."""

    def __init__(self) -> None:
        self.enqueued = self.started = self.completed = -1
        self.collectives = 0
        self.p2p = 0
        self.ops: dict[int, str] = {}

    def add(self, entry: dict) -> None:
        if _is_p2p(entry):
            self.p2p += 1
            return
        seq = _int(entry.get("collective_seq_id"))
        if seq is None:
            return
        self.collectives += 1
        state = entry.get("state")
        self.enqueued = max(self.enqueued, seq)
        if state in ("started", "completed"):
            self.started = max(self.started, seq)
        if state == "completed":
            self.completed = max(self.completed, seq)
        self.ops[seq] = str(entry.get("profiling_name", ""))[:100]

    def progress(self) -> Progress | None:
        if not self.collectives:
            return None
        return Progress(enqueued=self.enqueued, started=max(self.started, self.completed), completed=self.completed)


def _tally_entries(entries: object, groups: dict[str, GroupView]) -> dict[int, str]:
    """Fold entries into their groups; returns pg_id -> group name, for pg_status."""
    tallies: dict[str, _EntryTally] = {}
    pg_ids: dict[int, str] = {}
    for entry in entries[:MAX_ENTRIES] if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or (pg := _process_group(entry)) is None:
            continue
        name, desc = pg
        groups.setdefault(name, GroupView(name=name, desc=desc))
        if (pg_id := _int(entry.get("pg_id"))) is not None:
            pg_ids.setdefault(pg_id, name)
        tallies.setdefault(name, _EntryTally()).add(entry)
    for name, tally in tallies.items():
        view = groups[name]
        view.from_entries = tally.progress()
        view.ops = dict(sorted(tally.ops.items())[-64:])
        view.p2p_only = tally.p2p > 0 and tally.collectives == 0
    return pg_ids


def _apply_status(pg_status: object, pg_ids: dict[int, str], groups: dict[str, GroupView]) -> None:
    if not isinstance(pg_status, dict):
        return
    for key, status in list(pg_status.items())[:10_000]:
        if not isinstance(status, dict):
            continue
        pg_id = _int(key)
        # pg_status is keyed by the process-local pg_id; entries tie it to the group's name. With no
        # entry left for it, the default numbering (pg_id N is group "N") is the best guess.
        name = pg_ids.get(pg_id) if pg_id is not None else None
        name = name or (str(pg_id) if str(pg_id) in groups else f"pg_id {key}")
        enqueued = _int(status.get("last_enqueued_collective"))
        completed = _int(status.get("last_completed_collective"))
        if enqueued is None or completed is None:
            continue
        started = _int(status.get("last_started_collective"))
        groups.setdefault(name, GroupView(name=name)).from_status = Progress(
            enqueued=enqueued, started=None if started is None else max(started, completed), completed=completed
        )


def parse_dump(raw: dict, rank: int, source: str) -> RankDump:
    """One rank's groups and progress from a loaded dump; unknown or odd fields are skipped."""
    groups = _group_names(raw.get("pg_config"))
    pg_ids = _tally_entries(raw.get("entries"), groups)
    _apply_status(raw.get("pg_status"), pg_ids, groups)
    return RankDump(rank=rank, source=source, version=str(raw.get("version", ""))[:20], groups=groups)


# --- who lags -----------------------------------------------------------------------------------

_LEVELS = (
    "never entered collective {seq}",
    "entered collective {seq} but never started it on its GPU",
    "started collective {seq} but never completed it",
    "completed collective {seq}",
)
_LEVEL_IN = "is in collective {seq} and never completed it"  # level 2 when starts are not recorded


class Laggard(BaseModel):
    """A rank that is behind the rest of its process group."""

    rank: int
    group: str
    collective: int = Field(description="sequence number of the collective the others are in")
    state: str = Field(description="what this rank did with it, e.g. 'never entered collective 42'")
    ahead: list[int] = Field(description="ranks of the group that got further")
    progress: Progress
    op: str = Field(default="", description="the collective's profiling name, e.g. nccl:all_reduce")
    basis: str = Field(default="", description="entries | pg_status | log: where the progress came from")
    source: str = ""

    def summary(self) -> str:
        op = f" ({self.op})" if self.op else ""
        basis = f", per {self.basis}" if self.basis else ""
        return (
            f"rank {self.rank} {self.state}{op} in process group {self.group}, while ranks "
            f"{_span(self.ahead)} got further (last enqueued {self.progress.enqueued}, "
            f"last completed {self.progress.completed}{basis})"
        )


class LagResult(BaseModel):
    laggards: list[Laggard] = Field(default_factory=list)
    ahead: list[int] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


def _span(ranks: Iterable[int]) -> str:
    """[0, 1, 2, 4] -> '0-2,4'."""
    values = sorted(set(ranks))
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        parts.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ",".join(parts)


def find_laggards(progress: dict[int, Progress], group: str = "") -> LagResult:
    """The ranks that lag the others on the first collective not every rank completed.

    Healthy ranks run ahead (the CPU enqueues collectives before the GPU finishes the last one),
    so ranks are not compared by their raw counters but by what each did with that one
    collective: never entered < entered but not started < started < completed. The ranks at the
    lowest state are the laggards, if someone got further and they are at most half the group
    (more than half behind reads as one rank running ahead: a program desync, not a bad node).
    """
    label = f"process group {group}" if group else "the group"
    if len(progress) < 2:
        return LagResult(notes=[f"{label}: progress of fewer than two ranks: nothing to compare"])
    seq = min(p.completed for p in progress.values()) + 1
    started_known = any(p.started is not None and p.started > p.completed for p in progress.values())

    def level(p: Progress) -> int:
        if p.completed >= seq:
            return 3
        if p.enqueued < seq:
            return 0
        return 1 if started_known and (p.started is None or p.started < seq) else 2

    levels = {rank: level(p) for rank, p in progress.items()}
    low, high = min(levels.values()), max(levels.values())
    behind = sorted(r for r, lv in levels.items() if lv == low)
    ahead = sorted(r for r, lv in levels.items() if lv > low)
    state = (_LEVEL_IN if low == 2 and not started_known else _LEVELS[low]).format(seq=seq)
    if low == high:
        return LagResult(notes=[f"{label}: all {len(progress)} ranks {state}: no rank lags the others"])
    if len(behind) > len(progress) // 2:
        return LagResult(notes=[f"{label}: {len(behind)} of {len(progress)} ranks {state} while ranks "
                                f"{_span(ahead)} got further: more behind than ahead, no rank singled out"])
    laggards = [Laggard(rank=r, group=group, collective=seq, state=state, ahead=ahead, progress=progress[r])
                for r in behind]
    return LagResult(laggards=laggards, ahead=ahead)


# --- across ranks -------------------------------------------------------------------------------


class FlightRecorderAnalysis(BaseModel):
    """What a job's dumps say: which ranks lag, and why the rest could not be compared."""

    ranks: list[int] = Field(default_factory=list, description="ranks whose dump was read")
    world_size: int | None = Field(default=None, description="from the dumps' process groups")
    laggards: list[Laggard] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


def _load_all(paths: Sequence[Path | str], notes: list[str]) -> dict[int, RankDump]:
    dumps: dict[int, RankDump] = {}
    for path in paths:
        rank = rank_from_path(path)
        if rank is None:
            notes.append(f"{path}: no rank at the end of the file name (expected <prefix><rank>): skipped")
            continue
        if rank in dumps:
            notes.append(f"{path}: a second dump for rank {rank}: kept {dumps[rank].source}")
            continue
        try:
            dumps[rank] = parse_dump(load_dump(path), rank, str(path))
        except FlightRecorderError as exc:
            notes.append(str(exc))
    return dumps


def _group_progress(name: str, dumps: dict[int, RankDump]) -> tuple[dict[int, Progress], str]:
    """Each rank's progress in one group, all from the same kind of source so they compare."""
    views = {r: d.groups[name] for r, d in dumps.items() if name in d.groups}
    if views and all(v.from_entries is not None for v in views.values()):
        return {r: v.from_entries for r, v in views.items()}, "entries"
    return {r: v.from_status for r, v in views.items() if v.from_status is not None}, "pg_status"


def _analyze_group(name: str, dumps: dict[int, RankDump], notes: list[str]) -> LagResult:
    views = [d.groups[name] for d in dumps.values() if name in d.groups]
    if views and all(v.p2p_only for v in views):
        return LagResult(notes=[f"process group {name}: point-to-point only: its stages differ by design, "
                                "not compared"])
    members = next((v.ranks for v in views if v.ranks), [])
    missing = sorted(set(members) - set(dumps))
    if missing:
        notes.append(f"process group {name}: no dump from ranks {_span(missing)}")
    progress, source = _group_progress(name, dumps)
    desc = next((v.desc for v in views if v.desc), "")
    result = find_laggards(progress, f"{name} ({desc})" if desc else name)
    ops = {seq: op for v in views for seq, op in v.ops.items()}
    for lag in result.laggards:
        lag.op = ops.get(lag.collective, "")
        lag.source = dumps[lag.rank].source
        lag.basis = source
    return result


def _world_size(dumps: dict[int, RankDump]) -> int | None:
    ranks = {r for d in dumps.values() for v in d.groups.values() for r in v.ranks} | set(dumps)
    return max(ranks) + 1 if ranks else None


def analyze_dumps(paths: Sequence[Path | str]) -> FlightRecorderAnalysis:
    """Load every rank's dump and name the ranks that lag in any process group.

    A rank that lags in one group but waits, ahead, in another group where someone else lags is
    a victim of that other rank, not a culprit: it is dropped (unless that leaves nobody).
    """
    notes: list[str] = []
    dumps = _load_all(paths, notes)
    names = sorted({n for d in dumps.values() for n in d.groups})
    results = {name: _analyze_group(name, dumps, notes) for name in names}
    for result in results.values():
        notes.extend(result.notes)
    victims = {r for res in results.values() if res.laggards for r in res.ahead}
    # Each rank is reported from the group where it stands out most (the fewest laggards).
    ordered = sorted(results.values(), key=lambda res: len(res.laggards))
    laggards = [lag for res in ordered for lag in res.laggards]
    culprits = [lag for lag in laggards if lag.rank not in victims] or laggards
    best: dict[int, Laggard] = {}
    for lag in culprits:
        best.setdefault(lag.rank, lag)
    return FlightRecorderAnalysis(ranks=sorted(dumps), world_size=_world_size(dumps),
                                  laggards=sorted(best.values(), key=lambda lag: lag.rank), notes=notes)


def discover_flight_recorder_dumps(dirs: Sequence[Path | str], prefix: str = DEFAULT_PREFIX) -> list[Path]:
    """Files named <prefix><rank> under `dirs` (and their subfolders, 3 deep), sorted by rank.

    Missing or unreadable folders are skipped: dumps are optional evidence.
    """
    found: list[tuple[int, str, Path]] = []
    for top in map(Path, dirs):
        for folder, subdirs, files in _walk(top, depth=3):
            for name in files:
                rest = name[len(prefix):] if name.startswith(prefix) else ""
                if rest.isdigit() and len(found) < MAX_DUMP_FILES:
                    found.append((int(rest), str(folder / name), folder / name))
            subdirs.sort()
    return [path for _, _, path in sorted(found)]


def _walk(top: Path, depth: int):
    base = len(top.parts)
    for folder, subdirs, files in os.walk(top, onerror=lambda _exc: None):
        here = Path(folder)
        if len(here.parts) - base >= depth:
            subdirs[:] = []
        yield here, subdirs, files
