"""Burn-in with nccl-tests: `all_reduce_perf` output parsed, judged against a bus bandwidth per node type.

Output format (github.com/NVIDIA/nccl-tests, src/util.cu `writeResultHeader`, `writeBenchmarkLine*`,
`writeResultFooter`): `#` comment lines (arguments, one `#  Rank N Group G Pid P on HOST device D
[BUS] NAME` line per rank), a table with one row per message size

    size  count  type  redop  root  time algbw busbw #wrong  time algbw busbw #wrong
          (out-of-place .....................)  (in-place .......................)

(`#wrong` is `N/A` when the run does not check results) and a footer
`# Out of bounds values : N OK|FAILED` and `# Avg bus bandwidth : X`. A failed CUDA/NCCL call prints
`HOST: Test NCCL failure common.cu:LINE 'reason'` (src/common.h) and the table stops.

What busbw means (nccl-tests doc/PERFORMANCE.md): algbw = size / time; for AllReduce
busbw = algbw * 2(n-1)/n, "a number which we can compare to the hardware peak bandwidth",
independent of the rank count. So one expected figure per node type (its NVLink/NVSwitch, or for a
pair its network) judges any run; the footer's average over all sizes is what the tool itself
compares with its `-c`-style check (src/common.cu: FAILED below 0.9 x the expected average).

The parser and the judgement are pure; `check(ctx)` runs the tool through the node's Runner.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from pitstop.config import BurnInSettings
from pitstop.models import CheckResult, CheckStatus
from pitstop.node.status import NodeParseError
from pitstop.node.tool import Runner, ToolTimedOut, ToolUnavailable

if TYPE_CHECKING:
    from pitstop.node.check import CheckContext

_ROW = re.compile(
    r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>\S+)\s+(?P<redop>\S+)\s+(?P<root>\S+)"
    r"\s+(?P<t1>\S+)\s+(?P<a1>\S+)\s+(?P<b1>\S+)\s+(?P<w1>\S+)"
    r"\s+(?P<t2>\S+)\s+(?P<a2>\S+)\s+(?P<b2>\S+)\s+(?P<w2>\S+)\s*$"
)
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)", re.IGNORECASE)
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)", re.IGNORECASE)
# srun (slurmstepd execve), mpirun (ORTE/PRRTE) and a shell, when the binary is not on the node
_MISSING = re.compile(r"execve\(\): \S+: No such file or directory|was unable to find the executable|"
                      r"\S+: command not found|\S+: No such file or directory")
_RANK = re.compile(r"^#\s*Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)")
_FAILURE = re.compile(r"Test (?:NCCL |CUDA )?failure|NCCL WARN|error while loading shared libraries|"
                      r"Segmentation fault|Aborted|Bus error", re.IGNORECASE)


class NcclRow(BaseModel):
    """One message size; bandwidths in GB/s, times in microseconds; wrong None = not checked (N/A)."""

    size_bytes: int
    count: int
    type: str
    redop: str
    oop_time_us: float | None
    oop_algbw_gbps: float | None
    oop_busbw_gbps: float | None
    oop_wrong: int | None
    ip_time_us: float | None
    ip_algbw_gbps: float | None
    ip_busbw_gbps: float | None
    ip_wrong: int | None

    @property
    def wrong(self) -> int:
        return (self.oop_wrong or 0) + (self.ip_wrong or 0)

    @property
    def busbw_gbps(self) -> float | None:
        values = [v for v in (self.oop_busbw_gbps, self.ip_busbw_gbps) if v is not None]
        return max(values) if values else None


class NcclRun(BaseModel):
    rows: list[NcclRow] = Field(default_factory=list)
    hosts: list[str] = Field(default_factory=list, description="host of each rank, in rank order")
    out_of_bounds: int | None = None
    avg_busbw_gbps: float | None = None
    errors: list[str] = Field(default_factory=list, description="failure lines the tool printed")

    @property
    def complete(self) -> bool:
        """The footer was printed: the run reached its end (a crash or a kill leaves no footer)."""
        return self.avg_busbw_gbps is not None and self.out_of_bounds is not None

    @property
    def wrong(self) -> int:
        return sum(r.wrong for r in self.rows)

    @property
    def peak_busbw_gbps(self) -> float | None:
        values = [r.busbw_gbps for r in self.rows if r.busbw_gbps is not None]
        return max(values) if values else None


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # getFloatStr prints e.g. "N/A" or overflowed fields; not a measurement


def _wrong(text: str, line: str) -> int | None:
    if text.upper() == "N/A":
        return None
    try:
        return int(float(text))
    except ValueError:
        raise NodeParseError(f"all_reduce_perf: #wrong is not a number in {line.strip()[:120]!r}") from None


def parse_all_reduce_perf(text: str) -> NcclRun:
    """Parse all_reduce_perf (or any *_perf) stdout+stderr. Raises NodeParseError when it holds
    nothing of nccl-tests at all; a truncated run parses (its `complete` is False)."""
    run = NcclRun()
    seen_header = False
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            stripped = line.strip()
            seen_header = seen_header or "nThread" in stripped or "out-of-place" in stripped
            if m := _RANK.match(stripped):
                run.hosts.append(m.group(1))
            elif m := _OOB.match(stripped):
                run.out_of_bounds = int(m.group(1))
            elif m := _AVG.match(stripped):
                run.avg_busbw_gbps = _number(m.group(1))
            continue
        if m := _ROW.match(line):
            g = m.groupdict()
            run.rows.append(NcclRow(
                size_bytes=int(g["size"]), count=int(g["count"]), type=g["type"], redop=g["redop"],
                oop_time_us=_number(g["t1"]), oop_algbw_gbps=_number(g["a1"]), oop_busbw_gbps=_number(g["b1"]),
                oop_wrong=_wrong(g["w1"], line),
                ip_time_us=_number(g["t2"]), ip_algbw_gbps=_number(g["a2"]), ip_busbw_gbps=_number(g["b2"]),
                ip_wrong=_wrong(g["w2"], line),
            ))
        elif _FAILURE.search(line) and len(run.errors) < 20:
            run.errors.append(line.strip()[:300])
    if not (seen_header or run.rows or run.complete or run.errors):
        first = text.strip().splitlines()[:1]
        raise NodeParseError("all_reduce_perf printed no nccl-tests output"
                             + (f" (first line: {first[0][:120]!r})" if first else " (empty)"))
    return run


def judge(run: NcclRun, *, expected_busbw_gbps: float | None, min_fraction: float, what: str,
          node_type: str | None = None, returncode: int = 0) -> CheckResult:
    """Pass/fail with the numbers. Wrong results or out-of-bounds values FAIL whatever the speed
    (the collective computed garbage); a run without its footer crashed or was killed: FAIL."""
    details = {
        "what": what, "node_type": node_type, "avg_busbw_gbps": run.avg_busbw_gbps,
        "peak_busbw_gbps": run.peak_busbw_gbps, "expected_busbw_gbps": expected_busbw_gbps,
        "min_fraction": min_fraction, "out_of_bounds": run.out_of_bounds, "wrong": run.wrong,
        "ranks": len(run.hosts), "hosts": sorted(set(run.hosts)), "exit_code": returncode,
        "errors": run.errors, "rows": [r.model_dump() for r in run.rows],
    }
    avg = run.avg_busbw_gbps
    if run.wrong or run.out_of_bounds:
        bad = [r.size_bytes for r in run.rows if r.wrong]
        summary = (f"{what}: wrong results ({run.wrong} wrong element(s)"
                   + (f", first at {bad[0]} B" if bad else "") + f", out of bounds {run.out_of_bounds or 0}):"
                   " a GPU or link corrupts data; keep the node out and run dcgmi diag -r 3")
        return CheckResult(name="nccl", status=CheckStatus.FAIL, summary=summary[:600], details=details)
    if not run.complete:
        why = run.errors[0] if run.errors else (f"exit status {returncode}" if returncode else "output ends early")
        summary = f"{what} did not finish ({len(run.rows)} size(s) measured): {why}"
        return CheckResult(name="nccl", status=CheckStatus.FAIL, summary=summary[:600], details=details)
    if expected_busbw_gbps is None:
        known = f"node type {node_type!r}" if node_type else "this node (no node type known)"
        summary = (f"{what}: avg bus bandwidth {avg:g} GB/s, no wrong values; no expected figure for {known} "
                   "(set burn_in.expected_busbw_gbps)")
        return CheckResult(name="nccl", status=CheckStatus.OK, summary=summary, details=details)
    floor = expected_busbw_gbps * min_fraction
    # The footer's average includes latency-bound small sizes (a -b 8 sweep averages far below the
    # link's figure), so the peak over sizes is judged; the average is reported alongside.
    measured = run.peak_busbw_gbps if run.peak_busbw_gbps is not None else avg
    details["judged_busbw_gbps"] = measured
    pct = 100.0 * measured / expected_busbw_gbps
    if measured < floor:
        summary = (f"{what}: bus bandwidth {measured:g} GB/s is {pct:.0f} % of the expected {expected_busbw_gbps:g} GB/s"
                   f" for {node_type or 'this node'} (FAIL below {min_fraction:.0%}): a slow NVLink/NVSwitch,"
                   " PCIe or network path; see the pcie and ib checks")
        return CheckResult(name="nccl", status=CheckStatus.FAIL, summary=summary[:600], details=details)
    summary = (f"{what}: bus bandwidth {measured:g} GB/s ({pct:.0f} % of the expected {expected_busbw_gbps:g}"
               f" for {node_type or 'this node'}), no wrong values")
    return CheckResult(name="nccl", status=CheckStatus.OK, summary=summary, details=details)


def node_type_from_features(features: list[str], expected: dict[str, float]) -> str | None:
    """The first Slurm feature of the node that names a node type in the expected table."""
    for feature in features:
        if feature in expected:
            return feature
    return None


def parse_features(scontrol_record: str) -> list[str]:
    """AvailableFeatures (ActiveFeatures when absent) of a `scontrol show node -o` record."""
    for key in ("AvailableFeatures", "ActiveFeatures", "Features"):
        if m := re.search(rf"(?:^|\s){key}=(\S*)", scontrol_record):
            value = m.group(1)
            return [] if value in ("", "(null)") else [f for f in value.split(",") if f]
    return []


def resolve_node_type(node: str, settings: BurnInSettings, runner: Runner, scontrol: str,
                      timeout_s: float) -> tuple[str | None, str]:
    """(node type, where it came from): burn_in.node_type, else the node's Slurm features."""
    if settings.node_type:
        return settings.node_type, "burn_in.node_type"
    try:
        out = runner([scontrol, "show", "node", "-o", node], timeout_s)
    except (ToolUnavailable, ToolTimedOut) as exc:
        return None, f"no node type: {exc}"
    if out.returncode != 0:
        return None, f"no node type: scontrol show node {node}: {out.error_text}"
    found = node_type_from_features(parse_features(out.stdout), settings.expected_busbw_gbps)
    return found, "Slurm features" if found else "no Slurm feature of this node is in burn_in.expected_busbw_gbps"


def judge_output(text: str, settings: BurnInSettings, *, node_type: str | None, what: str,
                 expected: dict[str, float], returncode: int = 0) -> CheckResult:
    try:
        run = parse_all_reduce_perf(text)
    except NodeParseError as exc:
        if _MISSING.search(text):  # srun/mpirun could not start the binary on a node
            return CheckResult(name="nccl", status=CheckStatus.UNAVAILABLE,
                               summary=f"{what}: nccl-tests is not installed there ({_MISSING.search(text).group(0)})",
                               details={"what": what, "exit_code": returncode, "output_tail": text[-2000:]})
        return CheckResult(name="nccl", status=CheckStatus.FAIL if returncode else CheckStatus.WARN,
                           summary=f"{what}: {exc}" + (f" (exit status {returncode})" if returncode else ""),
                           details={"what": what, "exit_code": returncode, "output_tail": text[-2000:]})
    return judge(run, expected_busbw_gbps=expected.get(node_type) if node_type else None,
                 min_fraction=settings.min_fraction, what=what, node_type=node_type, returncode=returncode)


def judge_pair(text: str, node_a: str, node_b: str, settings: BurnInSettings, *, node_type: str | None,
               returncode: int = 0) -> CheckResult:
    """A two-node run (`srun -N2 --ntasks-per-node=8 all_reduce_perf -g 1` or mpirun, its combined
    output): judged against burn_in.expected_pair_busbw_gbps (the inter-node network sets the
    figure). Output from ranks on other hosts than the two is refused as a mix-up."""
    what = f"all_reduce_perf {node_a}+{node_b}"
    result = judge_output(text, settings, node_type=node_type, what=what,
                          expected=settings.expected_pair_busbw_gbps, returncode=returncode)
    hosts = set(result.details.get("hosts") or [])
    names = {node_a.split(".")[0], node_b.split(".")[0]}
    short = {h.split(".")[0] for h in hosts}
    if hosts and short != names:
        result.status = CheckStatus.WARN if result.status is CheckStatus.OK else result.status
        result.summary = f"{what}: ranks ran on {', '.join(sorted(short))}, not on both of {', '.join(sorted(names))}; " + result.summary
    result.details["pair"] = [node_a, node_b]
    return result


def check(ctx: CheckContext) -> CheckResult:
    """Single-node all_reduce_perf: minutes, all GPUs busy; opt-in only (never a default check)."""
    b = ctx.settings.burn_in
    argv = [b.all_reduce_perf_path, *b.all_reduce_perf_args]
    what = "all_reduce_perf " + " ".join(b.all_reduce_perf_args)
    try:
        out = ctx.runner(argv, b.timeout_s)
    except ToolUnavailable as exc:
        return CheckResult(name="nccl", status=CheckStatus.UNAVAILABLE,
                           summary=f"{exc} (nccl-tests; set burn_in.all_reduce_perf_path)")
    except ToolTimedOut as exc:
        return CheckResult(name="nccl", status=CheckStatus.FAIL,
                           summary=f"{exc}: a hung collective (raise burn_in.timeout_s if the sweep is just long)")
    nc = ctx.settings.node_check
    node_type, source = resolve_node_type(ctx.node, b, ctx.runner, nc.scontrol_path, nc.tool_timeout_s)
    result = judge_output(out.stdout + "\n" + out.stderr, b, node_type=node_type, what=what,
                          expected=b.expected_busbw_gbps, returncode=out.returncode)
    result.details["node_type_source"] = source
    return result
