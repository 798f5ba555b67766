"""Name the node(s) at fault in a multi-node job, with the evidence that names them.

    find_suspects(nodes, *, log_paths=(), kernel_logs=None, tasks_per_node=None,
                  flight_recorder=()) -> SuspectReport
    discover_flight_recorder_dumps(dirs, prefix="nccl_trace_rank_") -> list[Path]
    parse_tasks_per_node("8(x4)") -> [8, 8, 8, 8];  RankMap: rank <-> node

Evidence, per node:
- its kernel log: Xid lines read through pitstop.node.xid's catalog (hardware when the catalog
  bucket implicates the GPU, its memory or NVLink; never for APP or IGNORE Xids), NIC port
  link-down/module/health events, uncorrectable MCE/EDAC/AER lines, a GPU lost from the bus;
- the job's logs: host prefixes (NCCL's `host:pid:tid [dev]`, `srun: error: <host>: task N: ...`,
  `srun: error: Node failure on <host>`), rank prefixes (`[rank5]:` is a global rank; torchrun's
  `[default3]:` is a LOCAL rank, placed only together with a host), and the NCCL watchdog's
  per-rank progress (`[Rank 5] Watchdog caught collective operation timeout`, `last enqueued
  work`), compared across ranks;
- flight-recorder dumps (classifiers.flight_recorder): the ranks that lag their process group.

Only what singles a node out counts. An error most nodes print (every rank reports the timeout,
every task exits 1) names nobody; ranks are compared by how far they got and the ones behind are
named. Hosts that are not the job's nodes are ignored with a note.

Pure: no scheduler, no network; reads only the files it is given, bounded (`ReadLimits`: the
first and last part of a huge file, long lines cut, a cap on matching lines), and never raises on
their content. Kernel logs are taken as given: pass the job's time window (e.g. `journalctl -k
--since`), or an old Xid counts as if it were new.
"""

from __future__ import annotations

import bisect
import os
import re
import stat
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, Field

from pitstop.cluster.hostlist import HostlistError, expand
from pitstop.models import CheckStatus, Evidence
from pitstop.node.xid import Implicates, XidEvent, parse_kernel_log

from classifiers.flight_recorder import (
    FlightRecorderAnalysis,
    Laggard,
    Progress,
    analyze_dumps,
    discover_flight_recorder_dumps,
    find_laggards,
)
from classifiers.scan import evidence_text

__all__ = [
    "RankMap",
    "ReadLimits",
    "Suspect",
    "SuspectReport",
    "discover_flight_recorder_dumps",
    "find_suspects",
    "matching_lines",
    "parse_tasks_per_node",
]

MAX_NODES = 100_000  # as pitstop.cluster.hostlist: a broken SLURM_TASKS_PER_NODE must not eat memory
MAX_EVIDENCE = 12  # lines kept per suspect
EVIDENCE_PER_KIND = 3


class Suspect(BaseModel):
    """One node the evidence singles out. `hardware`: the evidence implicates the node itself."""

    node: str
    ranks: list[int] = Field(default_factory=list, description="global ranks named on this node")
    hardware: bool = False
    reasons: list[str] = Field(default_factory=list)
    evidence: list[Evidence] = Field(default_factory=list)


class SuspectReport(BaseModel):
    suspects: list[Suspect] = Field(default_factory=list, description="most likely first")
    notes: list[str] = Field(default_factory=list, description="what was skipped or could not be told")

    @property
    def hardware_nodes(self) -> list[str]:
        return [s.node for s in self.suspects if s.hardware]


# --- what each kind of evidence is worth ---------------------------------------------------------


class _Kind(NamedTuple):
    weight: int  # orders suspects: the sum over the distinct kinds that name a node
    hardware: bool
    relative: bool  # counts only if few nodes show it: an error most nodes print names none
    reason: str  # one line for Suspect.reasons; {detail} comes from the evidence


KINDS: dict[str, _Kind] = {
    "xid_hw": _Kind(100, True, False, "kernel log: {detail}"),
    "gpu_lost": _Kind(100, True, False, "kernel log: {detail}"),
    "node_failure": _Kind(95, True, False, "Slurm: node failure during the job ({detail})"),
    "nic_port": _Kind(90, True, False, "kernel log: network port fault: {detail}"),
    "hw_error": _Kind(70, True, False, "kernel log: uncorrectable hardware error: {detail}"),
    "fr_lag": _Kind(60, False, False, "flight recorder: {detail}"),
    "log_lag": _Kind(55, False, False, "NCCL watchdog: {detail}"),
    "nccl_ib_event": _Kind(50, False, True, "NCCL saw an InfiniBand port event on this host: {detail}"),
    "nccl_net": _Kind(40, False, True, "NCCL network error on this host: {detail}"),
    "launch_failed": _Kind(40, False, True, "Slurm could not launch tasks on this node: {detail}"),
    "cuda_error": _Kind(30, False, True, "CUDA error on this node: {detail}"),
    "xid_soft": _Kind(20, False, True, "kernel log: {detail}"),
    "first_failure": _Kind(20, False, True, "torchrun: first observed failure on this host"),
    "task_failed": _Kind(15, False, True, "Slurm: {detail}"),
    "nccl_warn": _Kind(10, False, True, "NCCL warning on this host: {detail}"),
}


# --- ranks <-> nodes -----------------------------------------------------------------------------

_TPN_ITEM = re.compile(r"(\d+)(?:\(x(\d+)\))?")


def parse_tasks_per_node(text: str) -> list[int]:
    """Slurm's SLURM_TASKS_PER_NODE: '8(x4)' -> [8, 8, 8, 8]; '2(x2),1' -> [2, 2, 1].

    Raises ValueError, quoting the bad part.
    """
    counts: list[int] = []
    for item in text.split(","):
        match = _TPN_ITEM.fullmatch(item.strip())
        if match is None:
            raise ValueError(f"cannot read tasks per node {text!r}: bad item {item.strip()!r}")
        times = int(match.group(2) or 1)
        if len(counts) + times > MAX_NODES:
            raise ValueError(f"tasks per node {text!r} describes more than {MAX_NODES} nodes")
        counts.extend([int(match.group(1))] * times)
    return counts


class RankMap(BaseModel):
    """Block distribution: node i holds the `counts[i]` ranks after those of the nodes before it."""

    nodes: list[str]
    counts: list[int]
    guessed: bool = Field(description="True when spread evenly because tasks per node were not given")

    @property
    def world_size(self) -> int:
        return sum(self.counts)

    def _starts(self) -> list[int]:
        starts, total = [], 0
        for count in self.counts:
            starts.append(total)
            total += count
        return starts

    def node_of(self, rank: int) -> str | None:
        if not 0 <= rank < self.world_size:
            return None
        return self.nodes[bisect.bisect_right(self._starts(), rank) - 1]  # skips nodes with no ranks

    def first_rank(self, node: str) -> int | None:
        index = self.nodes.index(node) if node in self.nodes else -1
        return self._starts()[index] if index >= 0 else None

    def global_rank(self, node: str, local: int) -> int | None:
        first = self.first_rank(node)
        if first is None or not 0 <= local < self.counts[self.nodes.index(node)]:
            return None
        return first + local

    @classmethod
    def build(cls, nodes: list[str], tasks_per_node: str | None, world_size: int | None,
              notes: list[str]) -> RankMap | None:
        """From SLURM_TASKS_PER_NODE when given, else `world_size` ranks spread evenly (a guess)."""
        if tasks_per_node:
            try:
                counts = parse_tasks_per_node(tasks_per_node)
            except ValueError as exc:
                notes.append(f"{exc}: ranks spread evenly instead")
            else:
                if len(counts) != len(nodes):
                    notes.append(f"tasks per node {tasks_per_node!r} describes {len(counts)} nodes; "
                                 f"the job has {len(nodes)}")
                return cls(nodes=nodes, counts=(counts + [0] * len(nodes))[: len(nodes)], guessed=False)
        if not world_size:
            return None
        base, extra = divmod(world_size, len(nodes))
        notes.append(f"tasks per node not given: {world_size} ranks assumed spread evenly over the "
                     f"{len(nodes)} nodes in order (Slurm's block distribution)")
        return cls(nodes=nodes, counts=[base + (i < extra) for i in range(len(nodes))], guessed=True)


class _Hosts:
    """Job node names, found by exact or short (before the first dot) name, case-insensitively."""

    def __init__(self, nodes: list[str]) -> None:
        self._by: dict[str, str] = {}
        for node in nodes:
            self._by.setdefault(node.lower(), node)
            self._by.setdefault(node.split(".")[0].lower(), node)

    def resolve(self, host: str) -> str | None:
        host = host.lower()
        return self._by.get(host) or self._by.get(host.split(".")[0])


# --- bounded reading -----------------------------------------------------------------------------


class ReadLimits(NamedTuple):
    head_bytes: int = 256 * 1024 * 1024  # read a file from its start this far...
    tail_bytes: int = 16 * 1024 * 1024  # ...and always its end, where a failure usually is
    line_bytes: int = 8 * 1024  # a longer line is cut around the match
    max_lines: int = 50_000  # matching lines kept per part of a file
    chunk_bytes: int = 4 * 1024 * 1024
    carry_bytes: int = 1024 * 1024  # a line without an end longer than this is scanned in pieces


def _regions(size: int, limits: ReadLimits) -> list[tuple[int, int, bool]]:
    """(start, end, line numbers known) for the parts of a file that are read."""
    if size <= limits.head_bytes + limits.tail_bytes:
        return [(0, size, True)]
    return [(0, limits.head_bytes, True), (size - limits.tail_bytes, size, False)]


def _lines_matching(body: bytes, pattern: re.Pattern[bytes], line_bytes: int) -> Iterator[tuple[int, bytes]]:
    """(offset of the line, the line cut to line_bytes around the match) for each matching line."""
    pos = 0
    while (match := pattern.search(body, pos)) is not None:
        start = body.rfind(b"\n", 0, match.start()) + 1
        end = body.find(b"\n", match.end())
        end = len(body) if end < 0 else end
        lo, hi = max(start, match.start() - line_bytes), min(end, match.start() + line_bytes)
        yield start, body[lo:hi]
        pos = end + 1


def _region_lines(stream, start: int, end: int, numbered: bool, pattern: re.Pattern[bytes],
                  limits: ReadLimits, notes: list[str], name: str) -> Iterator[tuple[int, bytes]]:
    stream.seek(start)
    pos, carry, line_no, kept = start, b"", 1, 0
    skip_partial = start > 0  # the tail starts mid-line
    while pos < end:
        chunk = stream.read(min(limits.chunk_bytes, end - pos))
        if not chunk:
            break
        pos += len(chunk)
        buf = carry + chunk
        if skip_partial:
            newline = buf.find(b"\n")
            buf, skip_partial = (b"", True) if newline < 0 else (buf[newline + 1:], False)
        cut = len(buf) if pos >= end else buf.rfind(b"\n") + 1
        if cut == 0 and len(buf) <= limits.carry_bytes:
            carry = buf
            continue
        cut = cut or len(buf)  # no line end in sight: scan this much, the rest reads as a new line
        body, carry = buf[:cut], buf[cut:]
        counted, before = 0, 0
        for offset, line in _lines_matching(body, pattern, limits.line_bytes):
            if kept >= limits.max_lines:
                notes.append(f"{name}: more than {limits.max_lines} matching lines in one part: the rest skipped")
                return
            kept += 1
            before += body.count(b"\n", counted, offset)
            counted = offset
            yield (line_no + before if numbered else 0), line
        line_no += body.count(b"\n")


def matching_lines(path: Path | str, pattern: re.Pattern[bytes], limits: ReadLimits = ReadLimits(),
                   notes: list[str] | None = None) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, raw line) for each line of `path` that `pattern` finds, bounded.

    A file larger than head+tail is read at both ends only (line numbers in the tail are 0:
    unknown). Unreadable files become a note in `notes`, never an exception.
    """
    notes = notes if notes is not None else []
    name = str(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode) and not os.path.isdir(path):
            notes.append(f"{name}: not a regular file (a pipe or device would block or never end): skipped")
            return
        with open(path, "rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            regions = _regions(size, limits)
            if len(regions) > 1:
                notes.append(f"{name}: {size} bytes: read its first {limits.head_bytes} and last "
                             f"{limits.tail_bytes} bytes only (line numbers in the tail unknown: 0)")
            for start, end, numbered in regions:
                yield from _region_lines(stream, start, end, numbered, pattern, limits, notes, name)
    except IsADirectoryError:
        notes.append(f"{name}: a directory, not a log: skipped")
    except FileNotFoundError:
        notes.append(f"{name}: no such file: skipped")
    except OSError as exc:
        notes.append(f"{name}: cannot read ({exc.strerror or exc}): skipped")


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").replace("\x00", "").rstrip("\r")


_JUNK = "\ufffd\x1b\t "  # replacement characters and escapes a progress bar or binary leaves in front


def _segment(text: str, keyword: re.Pattern[str]) -> str:
    """The part of a line a program wrote last: progress bars rewrite a line with \\r."""
    if "\r" in text:
        parts = [p for p in text.split("\r") if keyword.search(p)]
        text = parts[-1] if parts else text
    return text.lstrip(_JUNK)


# --- signals -------------------------------------------------------------------------------------


class _Signal(NamedTuple):
    """One piece of evidence before it is placed on a node."""

    kind: str
    detail: str
    evidence: Evidence
    node: str | None = None  # known (kernel logs) ...
    host: str | None = None  # ... or named by the line ...
    ranks: tuple[int, ...] = ()  # ... or by global ranks
    local: int | None = None  # torchrun's local rank: needs a host


class _Placed(NamedTuple):
    kind: str
    node: str
    ranks: tuple[int, ...]
    detail: str
    evidence: Evidence


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- job logs ------------------------------------------------------------------------------------

# Launcher and logger prefixes in front of a line, peeled off in any order. `v` is the number.
_PREFIXES: tuple[tuple[str | None, re.Pattern[str]], ...] = (
    (None, re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+Z [OE]\| ")),  # pitstop run's combined.log
    (None, re.compile(r"^\([\w.-]+ pid=\d+(?:, ip=[\d.]+)?\) ")),  # Ray worker output
    (None, re.compile(r"^\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[^\]]*\] ")),  # NCCL_DEBUG_TIMESTAMP_FORMAT
    ("task", re.compile(r"^\s*(?P<v>\d+): ")),  # srun --label: the task id
    ("rank", re.compile(r"^\[rank(?P<v>\d+)\]:")),  # torchrun >= 2.2 / c10 logging: GLOBAL rank
    ("local", re.compile(r"^\[[A-Za-z_][\w-]*?(?P<v>\d+)\]:")),  # torchrun's [<role><LOCAL rank>]:
)
# NCCL_DEBUG's prefix: hostname (cut at the first dot), pid, tid, CUDA device.
_NCCL_HOST = re.compile(r"^(?P<host>[A-Za-z][\w.-]*):\d+:\d+ \[\d+\] ")


class _Line(NamedTuple):
    text: str
    rank: int | None
    local: int | None
    host: str | None


def _peel(text: str) -> _Line:
    found: dict[str, int] = {}
    for _ in range(8):
        for key, regex in _PREFIXES:
            if match := regex.match(text):
                if key is not None:
                    found.setdefault(key, int(match.group("v")))
                text = text[match.end():]
                break
        else:
            break
    host = None
    if match := _NCCL_HOST.match(text):
        host, text = match.group("host"), text[match.end():]
    rank = found.get("rank")
    if rank is None and "local" not in found:
        rank = found.get("task")  # srun's label is the rank when ranks are srun tasks
    return _Line(text, rank, found.get("local"), host)


# Job-log lines that name a host or rank, first match wins. `host`/`tasks`/`detail` groups.
_JOB_ROWS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("node_failure", re.compile(r"^srun: error: (?P<detail>Node failure on (?P<host>[\w.-]+))")),
    ("launch_failed", re.compile(
        r"^srun: error: Task launch for \S+ failed on node (?P<host>[\w.-]+): (?P<detail>.*)")),
    # Killed/Terminated tasks are the ones srun took down after another failed: not evidence.
    ("task_failed", re.compile(
        r"^srun: error: (?P<host>[\w.-]+): tasks? (?P<tasks>[\d,\-]+): (?P<detail>Exited with exit code [1-9]\d*"
        r"|Segmentation fault|Aborted|Bus error|Illegal instruction|Floating point exception)")),
    ("nccl_ib_event", re.compile(r"NCCL WARN (?P<detail>NET/IB\b.*Got async event.*)")),
    ("nccl_net", re.compile(
        r"NCCL WARN (?P<detail>(?:NET/\w+|Net|IB|\w+:\d+/(?:IB|RoCE)) ?: .*"
        r"|.*(?:Got completion from peer|Connection closed by remote peer|Connection reset by peer"
        r"|ibv_\w+ failed).*)")),
    ("nccl_warn", re.compile(r"NCCL WARN (?P<detail>.+)")),
    ("cuda_error", re.compile(r"(?P<detail>CUDA error: .+|.*uncorrectable ECC error encountered.*)")),
)
_ROOT_CAUSE = "Root Cause (first observed failure)"
_ROOT_HOST = re.compile(r"^\s*host      :\s+(?P<host>[\w.-]+)\s*$")  # torchrun's _FAILURE_FORMAT_TEMPLATE
_ROOT_HOST_WITHIN = 8  # lines after the Root Cause header

# The watchdog's per-rank progress. `tag` holds "PG ID 0 PG GUID 0(default_pg) " on newer torch.
_PROGRESS_ROWS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("timeout", re.compile(r"\[(?P<tag>[^\[\]]*?)Rank (?P<grank>\d+)\]\s*Watchdog caught collective operation "
                           r"timeout: WorkNCCL\(SeqNum=(?P<seq>\d+)")),
    ("status", re.compile(r"\[(?P<tag>[^\[\]]*?)Rank (?P<grank>\d+)\]\s*failure detected by watchdog at work "
                          r"sequence id: \d+ PG status: last enqueued work: (?P<enq>-?\d+), last completed work: "
                          r"(?P<comp>-?\d+)")),
    ("dump", re.compile(r"\[(?P<tag>[^\[\]]*?)Rank (?P<grank>\d+)\][^\[]*?Last enqueued NCCL work: (?P<enq>-?\d+), "
                        r"last completed(?: NCCL work)?: (?P<comp>-?\d+)")),
)
_PG_ID = re.compile(r"PG (?:ID )?(\d+)")

_JOB_KEYWORDS = (  # plain literals, see _KERNEL_PREFILTER
    r"NCCL WARN|srun: error|Watchdog caught|failure detected by watchdog|Last enqueued NCCL work|CUDA error"
    r"|uncorrectable ECC error|first observed failure|host      : "
)
_JOB_PREFILTER = re.compile(_JOB_KEYWORDS.encode())
_JOB_KEYWORD = re.compile(_JOB_KEYWORDS)


def _task_ranks(text: str) -> tuple[int, ...]:
    ranks: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        if low.isdigit() and (high or low).isdigit() and int(high or low) - int(low) < 100_000:
            ranks.extend(range(int(low), int(high or low) + 1))
    return tuple(ranks)


class _JobScan:
    """Signals and watchdog progress from the job's logs."""

    def __init__(self) -> None:
        self.signals: list[_Signal] = []
        self.progress: dict[str, dict[int, Progress]] = {}  # group -> rank -> progress
        self.progress_lines: dict[tuple[str, int], Evidence] = {}
        self.ranks_seen: set[int] = set()
        self.unplaced = 0
        self.sub_group_lines = 0

    def feed(self, path: Path, limits: ReadLimits, notes: list[str]) -> None:
        root_at = None
        for line_no, raw in matching_lines(path, _JOB_PREFILTER, limits, notes):
            text = _segment(_text(raw), _JOB_KEYWORD)
            if _ROOT_CAUSE in text:
                root_at = line_no
                continue
            line = _peel(text)
            evidence = Evidence(line=line_no, text=evidence_text(raw), source=str(path))
            if line.rank is not None:
                self.ranks_seen.add(line.rank)
            if self._progress(line, evidence):
                continue
            if root_at and (match := _ROOT_HOST.match(text)) and 0 < line_no - root_at <= _ROOT_HOST_WITHIN:
                self.signals.append(_Signal("first_failure", "", evidence, host=match.group("host")))
                continue
            self._signal(line, evidence)

    def _signal(self, line: _Line, evidence: Evidence) -> None:
        for kind, regex in _JOB_ROWS:
            if (match := regex.search(line.text)) is None:
                continue
            groups = match.groupdict()
            host = groups.get("host") or line.host
            ranks = _task_ranks(groups["tasks"]) if groups.get("tasks") else (
                (line.rank,) if line.rank is not None else ())
            if host is None and not ranks:
                self.unplaced += 1
                return
            detail = groups.get("detail") or ""
            if groups.get("tasks"):
                detail = f"task {groups['tasks']}: {detail}"
            self.signals.append(_Signal(kind, detail, evidence, host=host, ranks=ranks, local=line.local))
            return

    def _progress(self, line: _Line, evidence: Evidence) -> bool:
        for kind, regex in _PROGRESS_ROWS:
            if (match := regex.search(line.text)) is None:
                continue
            pg = _PG_ID.search(match.group("tag"))
            group = pg.group(1) if pg else "0"
            rank = line.rank  # the [rankN]: prefix is global in every group
            if rank is None and group == "0":
                rank = int(match.group("grank"))  # a rank within group 0 is the global rank
            if rank is None:
                self.sub_group_lines += 1  # a rank within another group cannot be placed
                return True
            if kind == "timeout":  # stuck in SeqNum: it enqueued it and completed the one before
                seq = int(match.group("seq"))
                seen = Progress(enqueued=seq, completed=seq - 1)
            else:
                seen = Progress(enqueued=int(match.group("enq")), completed=int(match.group("comp")))
            ranks = self.progress.setdefault(group, {})
            old = ranks.get(rank, Progress())
            ranks[rank] = Progress(enqueued=max(old.enqueued, seen.enqueued),
                                   completed=max(old.completed, seen.completed))
            self.progress_lines[(group, rank)] = evidence
            return True
        return False

    def lag_signals(self, notes: list[str]) -> list[_Signal]:
        out: list[_Signal] = []
        for group, ranks in sorted(self.progress.items()):
            result = find_laggards(ranks, f"{group} (from the log)")
            notes.extend(f"NCCL watchdog: {n}" for n in result.notes)
            for lag in result.laggards:
                lag.basis = "log"
                out.append(_Signal("log_lag", lag.summary(), self.progress_lines[(group, lag.rank)],
                                   ranks=(lag.rank,)))
        return out

    def max_rank(self) -> int | None:
        ranks = self.ranks_seen | {r for s in self.signals for r in s.ranks}
        ranks |= {r for group in self.progress.values() for r in group}
        return max(ranks) if ranks else None


# --- kernel logs ---------------------------------------------------------------------------------

_KERNEL_ROWS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("gpu_lost", re.compile(r"NVRM: (?P<detail>.*(?:fallen off the bus|RmInitAdapter failed).*)")),
    ("nic_port", re.compile(
        r"(?P<detail>\bmlx\d_\w+\b.*(?:\b[Ll]ink (?:is )?[Dd]own\b|Port module event\[error\]"
        r"|Cable (?:error|unplugged)|health compromised|[Ff]atal error).*)")),
    ("nic_port", re.compile(
        r"(?P<detail>\b(?:ib\w*|mlx\d_\d+)\b.*\b(?:link (?:is )?down|lost carrier)\b.*)", re.I)),
    # corrected errors (EDAC CE, AER Corrected, "event severity: corrected") do not fail jobs
    ("hw_error", re.compile(
        r"(?P<detail>(?:Machine Check Exception|\[Hardware Error\]:.*(?:[Uu]ncorrect|PCC|[Ff]atal"
        r"|event severity: (?:fatal|recoverable))|EDAC \S+: \d+ UE |AER: (?:Multiple )?Uncorrect(?:ed|able)"
        r" \((?:Non-)?Fatal\)).*)")),
)
# Prefilters are plain literals: `re` then skips ahead by first character, ~5x faster than with
# classes or flags. The rows above decide; these only pick the lines worth decoding.
_KERNEL_PREFILTER = re.compile(
    rb"NVRM|mlx|ink down|ink Down|ink is down|ink is Down|INK DOWN|lost carrier|Hardware Error|Machine Check"
    rb"|EDAC|AER: "
)

# Xids by the catalog's grouping. None: not evidence; "status": hardware only when NVIDIA's
# action for it is a reset or worse (driver/firmware faults, and Xid 154's recovery action).
_XID_KINDS: dict[Implicates, str | None] = {
    Implicates.HARDWARE: "xid_hw",
    Implicates.MEMORY: "xid_hw",
    Implicates.NVLINK: "xid_hw",
    Implicates.APP: "xid_soft",  # names where the program faulted, not a bad node
    Implicates.DRIVER: "status",
    Implicates.INFO: "status",
    Implicates.SYMPATHETIC: None,  # a consequence of another Xid
}


def _xid_kind(event: XidEvent) -> str | None:
    if event.status is CheckStatus.OK:  # the IGNORE bucket and its kin: not evidence
        return None
    info = event.info
    kind = _XID_KINDS.get(info.implicates) if info is not None else "xid_soft"
    if kind == "status":
        return "xid_hw" if event.status is CheckStatus.FAIL else "xid_soft"
    return kind


def _xid_detail(event: XidEvent) -> str:
    info = event.info
    where = f" on GPU {event.pci_bus}" if event.pci_bus else ""
    if info is None:
        return f"Xid {event.xid}{where}: not in NVIDIA's catalog"
    return (f"Xid {event.xid}{where}: {info.description} "
            f"(NVIDIA action {info.immediate}; implicates {info.implicates.value})")


def _kernel_signal(node: str, text: str, evidence: Evidence) -> _Signal | None:
    if "NVRM: Xid" in text:
        events = parse_kernel_log(text).events
        kind = _xid_kind(events[0]) if events else None
        return _Signal(kind, _xid_detail(events[0]), evidence, node=node) if kind else None
    for kind, regex in _KERNEL_ROWS:
        if match := regex.search(text):
            return _Signal(kind, match.group("detail"), evidence, node=node)
    return None


def _scan_kernel_log(node: str, path: Path, limits: ReadLimits, notes: list[str]) -> list[_Signal]:
    signals = []
    for line_no, raw in matching_lines(path, _KERNEL_PREFILTER, limits, notes):
        evidence = Evidence(line=line_no, text=evidence_text(raw), source=str(path))
        if signal := _kernel_signal(node, _text(raw), evidence):
            signals.append(signal)
    return signals


# --- placing, filtering, ranking -----------------------------------------------------------------


class _Placer:
    def __init__(self, hosts: _Hosts, rank_map: RankMap | None, notes: list[str]) -> None:
        self._hosts, self._map, self._notes = hosts, rank_map, notes
        self._noted: set[str] = set()

    def _note(self, key: str, text: str) -> None:
        if key not in self._noted and len(self._noted) < 50:
            self._noted.add(key)
            self._notes.append(text)

    def place(self, sig: _Signal) -> _Placed | None:
        where = f"{sig.evidence.source}:{sig.evidence.line}"
        node = sig.node
        if node is None and sig.host is not None:
            node = self._hosts.resolve(sig.host)
            if node is None:
                self._note(f"host {sig.host}", f"host {sig.host} ({where}) is not one of the job's nodes: ignored")
                return None
        ranks = tuple(r for r in sig.ranks if self._rank_ok(r, where))
        if node is None:
            nodes = {self._map.node_of(r) for r in ranks} if self._map else set()
            if len(nodes) != 1 or None in nodes:
                if sig.ranks:
                    self._note(f"rank {sig.ranks}", f"rank(s) {_ranks(sig.ranks)} ({where}) could not be placed "
                               "on one node (give tasks per node)")
                return None
            node = nodes.pop()
        if not ranks and sig.local is not None and self._map:
            ranks = tuple(r for r in [self._map.global_rank(node, sig.local)] if r is not None)
        return _Placed(sig.kind, node, ranks, sig.detail, sig.evidence)

    def _rank_ok(self, rank: int, where: str) -> bool:
        if self._map is None or self._map.guessed or rank < self._map.world_size:
            return True
        self._note(f"outside {rank}",
                   f"rank {rank} ({where}) is outside the job's {self._map.world_size} ranks: ignored")
        return False


def _ranks(ranks: Sequence[int]) -> str:
    return ",".join(map(str, ranks[:8])) + ("…" if len(ranks) > 8 else "")


def _drop_common(placed: list[_Placed], n_nodes: int, notes: list[str]) -> list[_Placed]:
    """Drop relative evidence that most nodes show: it singles out none of them."""
    if n_nodes < 2:
        return placed
    by_kind: dict[str, set[str]] = {}
    for p in placed:
        by_kind.setdefault(p.kind, set()).add(p.node)
    limit = max(1, n_nodes // 2)
    common = {k for k, nodes in by_kind.items() if KINDS[k].relative and len(nodes) > limit}
    for kind in sorted(common):
        notes.append(f"{len(by_kind[kind])} of {n_nodes} nodes show '{kind}' evidence: most nodes print it, so it "
                     "names none of them")
    for kind, nodes in sorted(by_kind.items()):
        if KINDS[kind].hardware and len(nodes) == n_nodes:
            notes.append(f"every node shows '{kind}' evidence: a shared cause (switch, fabric, power) is likelier "
                         "than one bad node")
    return [p for p in placed if p.kind not in common]


def _drop_consequences(placed: list[_Placed], notes: list[str]) -> list[_Placed]:
    """Once a node shows hardware evidence, the errors its peers print are likely its echo.

    A dead GPU or port makes every peer log NCCL errors and failed tasks: those relative signals
    on nodes without hardware evidence of their own are dropped. Lag stays: it is measured.
    """
    hard = {p.node for p in placed if KINDS[p.kind].hardware}
    echo = sorted({p.node for p in placed if p.node not in hard and KINDS[p.kind].relative})
    if not hard or not echo:
        return placed
    notes.append(f"errors on {', '.join(echo)} not counted: {', '.join(sorted(hard))} shows hardware evidence, "
                 "and peers of a failed node print such errors")
    return [p for p in placed if p.node in hard or not KINDS[p.kind].relative]


def _suspect(node: str, placed: list[_Placed]) -> tuple[int, Suspect]:
    kinds = sorted(dict.fromkeys(p.kind for p in placed), key=lambda k: -KINDS[k].weight)  # stable: first seen
    reasons, evidence = [], []
    for kind in kinds:
        rows = [p for p in placed if p.kind == kind]
        more = f" ({len(rows)} lines)" if len(rows) > 1 else ""
        reasons.append(KINDS[kind].reason.format(detail=_short(rows[0].detail)) + more)
        evidence.extend(p.evidence for p in rows[:EVIDENCE_PER_KIND])
    suspect = Suspect(
        node=node,
        ranks=sorted({r for p in placed for r in p.ranks}),
        hardware=any(KINDS[k].hardware for k in kinds),
        reasons=reasons,
        evidence=list(dict.fromkeys(evidence))[:MAX_EVIDENCE],
    )
    return sum(KINDS[k].weight for k in kinds), suspect


def _rank_suspects(placed: list[_Placed], nodes: list[str]) -> list[Suspect]:
    by_node: dict[str, list[_Placed]] = {}
    for p in placed:
        by_node.setdefault(p.node, []).append(p)
    scored = [_suspect(node, rows) for node, rows in by_node.items()]
    # Hardware evidence first (it names the node itself), then weight, then Slurm's node order.
    scored.sort(key=lambda item: (not item[1].hardware, -item[0], nodes.index(item[1].node)))
    return [suspect for _, suspect in scored]


def _fr_signals(fr: FlightRecorderAnalysis, notes: list[str]) -> list[_Signal]:
    notes.extend(f"flight recorder: {n}" for n in fr.notes)
    return [_lag_signal(lag) for lag in fr.laggards]


def _lag_signal(lag: Laggard) -> _Signal:
    summary = lag.summary()
    return _Signal("fr_lag", summary, Evidence(line=0, text=summary, source=lag.source), ranks=(lag.rank,))


def _kernel_signals(kernel_logs: Mapping[str, Path | str], hosts: _Hosts, limits: ReadLimits,
                    notes: list[str]) -> list[_Signal]:
    signals: list[_Signal] = []
    for host, path in kernel_logs.items():
        node = hosts.resolve(host)
        if node is None:
            notes.append(f"kernel log {path} is for {host}, not one of the job's nodes: ignored")
            continue
        signals.extend(_scan_kernel_log(node, Path(path), limits, notes))
    return signals


def _scan_job_logs(log_paths: Sequence[Path | str], limits: ReadLimits, notes: list[str]) -> _JobScan:
    job = _JobScan()
    for path in log_paths:
        job.feed(Path(path), limits, notes)
    if job.unplaced:
        notes.append(f"{job.unplaced} error line(s) in the job log named no host or rank: not placed")
    if job.sub_group_lines:
        notes.append(f"{job.sub_group_lines} watchdog line(s) give a rank within a sub-group and no global "
                     "rank prefix: not compared")
    return job


def _node_list(nodes: Sequence[str] | str, notes: list[str]) -> list[str]:
    if isinstance(nodes, str):
        try:
            nodes = expand(nodes)
        except HostlistError as exc:
            notes.append(f"cannot read the job's node list: {exc}")
            return []
    return list(dict.fromkeys(n for n in nodes if n))


def find_suspects(
    nodes: Sequence[str] | str,
    *,
    log_paths: Sequence[Path | str] = (),
    kernel_logs: Mapping[str, Path | str] | None = None,
    tasks_per_node: str | None = None,
    flight_recorder: Sequence[Path | str] = (),
    limits: ReadLimits = ReadLimits(),
) -> SuspectReport:
    """The nodes the evidence singles out, most likely first, each with its reasons and lines.

    `nodes`: the job's nodes in Slurm's order (a list, or a hostlist such as 'gpu[01-04]').
    `tasks_per_node`: ranks per node in SLURM_TASKS_PER_NODE syntax ('8(x4)', '2,1'); for
    torchrun under one srun task per node give the ranks (nproc-per-node), not the tasks.
    Unknown: ranks spread evenly (a guess, noted). `kernel_logs`: node -> that node's kernel
    log. `flight_recorder`: dump files (see discover_flight_recorder_dumps).
    """
    notes: list[str] = []
    nodes = _node_list(nodes, notes)
    if not nodes:
        return SuspectReport(notes=notes or ["no node list: evidence cannot be placed on nodes"])
    hosts = _Hosts(nodes)
    fr = analyze_dumps(flight_recorder) if flight_recorder else None
    job = _scan_job_logs(log_paths, limits, notes)
    seen = job.max_rank()
    world = max((fr.world_size or 0) if fr else 0, seen + 1 if seen is not None else 0) or None
    rank_map = RankMap.build(nodes, tasks_per_node, world, notes)
    signals = [*job.signals, *job.lag_signals(notes), *(_fr_signals(fr, notes) if fr else []),
               *_kernel_signals(kernel_logs or {}, hosts, limits, notes)]
    placer = _Placer(hosts, rank_map, notes)
    placed = [p for p in map(placer.place, signals) if p is not None]
    placed = _drop_consequences(_drop_common(placed, len(nodes), notes), notes)
    return SuspectReport(suspects=_rank_suspects(placed, nodes), notes=notes)
