"""Host CPU and memory health: machine checks, EDAC memory error counts, the cpufreq governor.

Sources (all plain text, one value per file unless said otherwise):
- EDAC, Documentation/ABI/testing/sysfs-devices-edac: /sys/devices/system/edac/mc/mc<N>/
  ce_count, ue_count, ce_noinfo_count, ue_noinfo_count (errors since the counters were reset,
  normally boot), mc_name, seconds_since_reset; per DIMM (or rank) dimm<N>/ (rank<N>/)
  dimm_ce_count, dimm_ue_count, dimm_label, dimm_location.
- Machine-check exceptions, arch/x86/kernel/irq.c (arch_show_interrupts): the /proc/interrupts
  row "MCE: <count per CPU> Machine check exceptions" (and "MCP ... Machine check polls").
  A nonzero MCE count on a running node is a recovered machine check (e.g. poisoned memory).
- Governor, Documentation/admin-guide/pm/cpufreq.rst: /sys/devices/system/cpu/cpu<N>/cpufreq/
  scaling_governor ("performance", "powersave", "schedutil", ...).

`read_snapshot` reads a sysfs/procfs tree (roots are settings, so tests use fixture trees);
`process_cpu_mem` is the pure verdict. A part whose files are absent (no EDAC driver, not x86, a
VM without cpufreq) is reported as not available, and all three absent is UNAVAILABLE.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from pitstop.config import NodeCheckSettings
from pitstop.models import CheckResult, CheckStatus
from pitstop.node.status import NodeParseError, worst

if TYPE_CHECKING:
    from pitstop.node.check import CheckContext

MAX_ATTR_BYTES = 4096
MAX_INTERRUPTS_BYTES = 4 * 1024 * 1024  # one row per IRQ, one column per CPU


class Dimm(BaseModel):
    name: str
    label: str | None = None
    location: str | None = None
    ce_count: int | None = None
    ue_count: int | None = None


class MemoryController(BaseModel):
    name: str
    mc_name: str | None = None
    ce_count: int | None = None
    ue_count: int | None = None
    ce_noinfo_count: int | None = None
    ue_noinfo_count: int | None = None
    seconds_since_reset: int | None = None
    dimms: list[Dimm] = Field(default_factory=list)


class CpuMemSnapshot(BaseModel):
    controllers: list[MemoryController] | None = Field(default=None, description="None: no EDAC here")
    mce_exceptions: int | None = Field(default=None, description="None: no MCE row in /proc/interrupts")
    governors: dict[str, int] | None = Field(default=None, description="governor -> CPUs; None: no cpufreq")
    unreadable: list[str] = Field(default_factory=list)


def parse_count(text: str | None, what: str) -> int | None:
    """One sysfs counter ("12\\n"). None for a missing file; garbage raises."""
    if text is None:
        return None
    value = text.strip()
    if not value.isdigit():
        raise NodeParseError(f"{what}: expected a count, got {value[:40]!r}")
    return int(value)


def parse_interrupts(text: str) -> dict[str, int]:
    """Totals of the named (non-numeric) rows of /proc/interrupts, e.g. {"MCE": 0, "MCP": 96}."""
    lines = text.splitlines()
    if not lines or "CPU0" not in lines[0]:
        raise NodeParseError("/proc/interrupts has no CPU header line")
    ncpu = len(lines[0].split())
    totals: dict[str, int] = {}
    for line in lines[1:]:
        name, sep, rest = line.partition(":")
        name = name.strip()
        if not sep or not name or name.isdigit():
            continue
        counts = []
        for field in rest.split()[:ncpu]:
            if not field.isdigit():
                break
            counts.append(int(field))
        totals[name] = sum(counts)
    return totals


def _read(path: Path) -> str | None:
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_ATTR_BYTES)
    except OSError:
        return None
    return data.decode("utf-8", errors="replace").strip()


def _sorted_numbered(paths: list[Path], prefix: str) -> list[Path]:
    def key(p: Path) -> tuple[int, str]:
        tail = p.name[len(prefix):]
        return (int(tail) if tail.isdigit() else 1 << 30, p.name)

    return sorted((p for p in paths if re.fullmatch(rf"{prefix}\d+", p.name)), key=key)


def read_controllers(sysfs_root: Path, unreadable: list[str]) -> list[MemoryController] | None:
    base = sysfs_root / "devices" / "system" / "edac" / "mc"
    try:
        mc_dirs = _sorted_numbered(list(base.iterdir()), "mc")
    except OSError:
        return None
    controllers = []
    for mc_dir in mc_dirs:
        counts: dict[str, int | None] = {}
        for attr in ("ce_count", "ue_count", "ce_noinfo_count", "ue_noinfo_count", "seconds_since_reset"):
            try:
                counts[attr] = parse_count(_read(mc_dir / attr), f"{mc_dir.name}/{attr}")
            except NodeParseError:
                counts[attr] = None
                unreadable.append(f"{mc_dir.name}/{attr}")
        mc = MemoryController(name=mc_dir.name, mc_name=_read(mc_dir / "mc_name"), **counts)
        try:
            children = list(mc_dir.iterdir())
        except OSError:
            children = []
        for dimm_dir in _sorted_numbered(children, "dimm") + _sorted_numbered(children, "rank"):
            dimm = Dimm(name=dimm_dir.name, label=_read(dimm_dir / "dimm_label") or None,
                        location=_read(dimm_dir / "dimm_location") or None)
            for attr, field in (("dimm_ce_count", "ce_count"), ("dimm_ue_count", "ue_count")):
                try:
                    setattr(dimm, field, parse_count(_read(dimm_dir / attr), f"{mc_dir.name}/{dimm_dir.name}/{attr}"))
                except NodeParseError:
                    unreadable.append(f"{mc_dir.name}/{dimm_dir.name}/{attr}")
            mc.dimms.append(dimm)
        controllers.append(mc)
    return controllers


def read_governors(sysfs_root: Path) -> dict[str, int] | None:
    base = sysfs_root / "devices" / "system" / "cpu"
    try:
        cpus = _sorted_numbered(list(base.iterdir()), "cpu")
    except OSError:
        return None
    found = Counter(g for g in (_read(c / "cpufreq" / "scaling_governor") for c in cpus) if g)
    return dict(found) or None


def read_snapshot(sysfs_root: Path, procfs_root: Path) -> CpuMemSnapshot:
    snap = CpuMemSnapshot()
    snap.controllers = read_controllers(sysfs_root, snap.unreadable)
    snap.governors = read_governors(sysfs_root)
    try:
        with (procfs_root / "interrupts").open("rb") as fh:
            text = fh.read(MAX_INTERRUPTS_BYTES).decode("utf-8", errors="replace")
        snap.mce_exceptions = parse_interrupts(text).get("MCE")
    except OSError:
        pass
    except NodeParseError:
        snap.unreadable.append("interrupts")
    return snap


def _dimm_names(mc: MemoryController, field: str) -> str:
    bad = [d.label or d.location or d.name for d in mc.dimms if (getattr(d, field) or 0) > 0]
    return f" on {', '.join(bad[:4])}" if bad else ""


def findings(snap: CpuMemSnapshot, settings: NodeCheckSettings) -> list[tuple[CheckStatus, str]]:
    found: list[tuple[CheckStatus, str]] = []
    for mc in snap.controllers or []:
        ue = (mc.ue_count or 0) + (mc.ue_noinfo_count or 0)
        ce = (mc.ce_count or 0) + (mc.ce_noinfo_count or 0)
        if ue > settings.edac_ue_fail:
            found.append((CheckStatus.FAIL, f"{mc.name}: {ue} uncorrectable memory error(s){_dimm_names(mc, 'ue_count')}"
                                            ": data may be corrupt, drain and replace the DIMM"))
        if ce > settings.edac_ce_warn:
            found.append((CheckStatus.WARN, f"{mc.name}: {ce} correctable memory errors{_dimm_names(mc, 'ce_count')}"
                                            f" (warn above {settings.edac_ce_warn}): a DIMM is wearing out"))
    if snap.mce_exceptions is not None and snap.mce_exceptions > settings.mce_warn:
        found.append((CheckStatus.WARN, f"{snap.mce_exceptions} machine-check exception(s) since boot: "
                                        "see the kernel log (mce:) or rasdaemon for the bank and address"))
    want = settings.cpu_governor
    if want and snap.governors:
        others = {g: n for g, n in snap.governors.items() if g != want}
        if others:
            total = sum(snap.governors.values())
            names = ", ".join(f"{g} on {n}" for g, n in sorted(others.items()))
            found.append((CheckStatus.WARN, f"CPU frequency governor is {names} of {total} CPU(s), want {want}: "
                                            "data loading and NCCL proxy threads run slower"))
    return found


def process_cpu_mem(snap: CpuMemSnapshot, settings: NodeCheckSettings) -> CheckResult:
    """The verdict on one snapshot. Pure."""
    parts = {"edac": snap.controllers is not None, "mce": snap.mce_exceptions is not None,
             "governor": snap.governors is not None}
    details = {"available": parts, **snap.model_dump()}
    if not any(parts.values()):
        return CheckResult(name="cpu_mem", status=CheckStatus.UNAVAILABLE, details=details,
                           summary="no EDAC counters, no MCE row in /proc/interrupts, no cpufreq on this node")
    found = findings(snap, settings)
    status = worst(s for s, _ in found)
    if found:
        ordered = sorted(found, key=lambda f: f[0] is not status)
        summary = ordered[0][1] + (f" (+{len(found) - 1} more)" if len(found) > 1 else "")
    else:
        bits = []
        if snap.controllers is not None:
            ce = sum((m.ce_count or 0) + (m.ce_noinfo_count or 0) for m in snap.controllers)
            bits.append(f"{len(snap.controllers)} memory controller(s), {ce} correctable error(s)")
        if snap.mce_exceptions is not None:
            bits.append(f"{snap.mce_exceptions} machine checks")
        if snap.governors:
            bits.append("governor " + "/".join(sorted(snap.governors)))
        missing = [p for p, ok in parts.items() if not ok]
        summary = ", ".join(bits) + (f" ({', '.join(missing)} not available)" if missing else "")
    details["findings"] = [{"status": s.value, "message": m} for s, m in found]
    return CheckResult(name="cpu_mem", status=status, summary=summary, details=details)


def check(ctx: CheckContext) -> CheckResult:
    nc = ctx.settings.node_check
    return process_cpu_mem(read_snapshot(nc.sysfs_root, nc.procfs_root), nc)
