"""InfiniBand ports from sysfs (`/sys/class/infiniband/<dev>/ports/<n>/...`), `ibstat` as fallback.

sysfs formats (drivers/infiniband/core/sysfs.c): `state` is "4: ACTIVE", `phys_state` is
"5: LinkUp", `rate` is "200 Gb/sec (4X HDR)", `link_layer` is "InfiniBand" or "Ethernet", and each
file under `counters/` holds one decimal number. `root` is a parameter so tests use a fake tree.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from pydantic import BaseModel, Field

from pitstop.config import NodeCheckSettings
from pitstop.models import CheckResult, CheckStatus
from pitstop.node.status import NodeParseError, worst

MAX_SYSFS_BYTES = 4096  # sysfs attributes are one short line; anything longer is not sysfs


class IbPort(BaseModel):
    device: str
    port: int
    state: str | None = Field(default=None, description="ACTIVE, DOWN, INIT, ARMED")
    phys_state: str | None = Field(default=None, description="LinkUp, Polling, Disabled, ...")
    rate_gbps: float | None = None
    rate_text: str | None = None
    link_layer: str | None = None
    counters: dict[str, int] = Field(default_factory=dict)
    unreadable: list[str] = Field(default_factory=list, description="attributes that could not be read")
    source: str = "sysfs"


def _read_attr(path: Path) -> str | None:
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_SYSFS_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_SYSFS_BYTES:
        return None
    return data.decode("utf-8", errors="replace").strip() or None


def parse_state(text: str | None) -> str | None:
    """'4: ACTIVE' -> 'ACTIVE'; '5: LinkUp' -> 'LinkUp'."""
    if not text:
        return None
    match = re.match(r"^\s*\d+\s*:\s*(\S.*)$", text)
    return (match.group(1) if match else text).strip() or None


def parse_rate(text: str | None) -> float | None:
    """'200 Gb/sec (4X HDR)' -> 200.0; ibstat's bare '200' -> 200.0."""
    if not text:
        return None
    match = re.match(r"^\s*(\d+(?:\.\d+)?)", text)
    return float(match.group(1)) if match else None


def read_sysfs(root: Path) -> list[IbPort]:
    """Every port under `root` (normally /sys/class/infiniband). Missing root: empty list."""
    ports: list[IbPort] = []
    try:
        devices = sorted(p for p in root.iterdir() if p.is_dir())
    except OSError:
        return ports
    for dev in devices:
        try:
            port_dirs = sorted((p for p in (dev / "ports").iterdir() if p.is_dir()), key=lambda p: p.name)
        except OSError:
            continue
        for pdir in port_dirs:
            if not pdir.name.isdigit():
                continue
            port = IbPort(device=dev.name, port=int(pdir.name))
            for attr in ("state", "phys_state", "rate", "link_layer"):
                value = _read_attr(pdir / attr)
                if value is None:
                    port.unreadable.append(attr)
                elif attr == "state":
                    port.state = parse_state(value)
                elif attr == "phys_state":
                    port.phys_state = parse_state(value)
                elif attr == "rate":
                    port.rate_text, port.rate_gbps = value, parse_rate(value)
                else:
                    port.link_layer = value
            port.counters, bad = _read_counters(pdir / "counters")
            port.unreadable.extend(bad)
            ports.append(port)
    return ports


def _read_counters(cdir: Path) -> tuple[dict[str, int], list[str]]:
    counters: dict[str, int] = {}
    bad: list[str] = []
    try:
        files = sorted(p for p in cdir.iterdir() if p.is_file())
    except OSError:
        return counters, bad
    for f in files:
        value = _read_attr(f)
        if value is not None and value.isdigit():
            counters[f.name] = int(value)
        else:
            bad.append(f"counters/{f.name}")
    return counters, bad


def parse_ibstat(text: str | bytes) -> list[IbPort]:
    """Parse `ibstat` output. Empty output (ibstat with no HCA) gives []; garbage raises."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not text.strip():
        return []
    ports: list[IbPort] = []
    device: str | None = None
    current: IbPort | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if m := re.match(r"^CA '([^']+)'", line):
            device, current = m.group(1), None
        elif m := re.match(r"^Port (\d+):$", line):
            if device is None:
                raise NodeParseError(f"ibstat output has a port before any CA line: {line!r}")
            current = IbPort(device=device, port=int(m.group(1)), source="ibstat")
            ports.append(current)
        elif current is not None and ":" in line:
            key, _, value = (part.strip() for part in line.partition(":"))
            if key == "State":
                current.state = value.upper()
            elif key == "Physical state":
                current.phys_state = value
            elif key == "Rate":
                current.rate_text, current.rate_gbps = value, parse_rate(value)
            elif key == "Link layer":
                current.link_layer = value
    if device is None:
        raise NodeParseError(f"ibstat output has no CA section: {text.strip()[:80]!r}")
    return ports


def run_ibstat(ibstat: str, timeout_s: float) -> tuple[list[IbPort] | None, str]:
    """Ports from ibstat, or (None, why) when it is missing or fails."""
    binary = shutil.which(ibstat)
    if binary is None:
        return None, f"no {ibstat} on this node"
    try:
        proc = subprocess.run([binary], capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return None, f"ibstat did not answer within {timeout_s:g} s"
    except OSError as exc:
        return None, f"ibstat could not be run: {exc}"
    if proc.returncode != 0:
        return None, f"ibstat exited {proc.returncode}: {proc.stderr.decode('utf-8', 'replace').strip()[:200]}"
    try:
        return parse_ibstat(proc.stdout), "ibstat"
    except NodeParseError as exc:
        return None, str(exc)


def port_findings(port: IbPort, settings: NodeCheckSettings) -> list[tuple[CheckStatus, str]]:
    """What is wrong with one port. Pure."""
    name = f"{port.device} port {port.port}"
    found: list[tuple[CheckStatus, str]] = []
    if port.state is not None and port.state.upper() != "ACTIVE":
        found.append((CheckStatus.FAIL, f"{name} is {port.state} (want ACTIVE): check the cable and the subnet manager"))
    if port.phys_state is not None and port.phys_state.lower() != "linkup":
        found.append((CheckStatus.FAIL, f"{name} physical state {port.phys_state} (want LinkUp): check the cable"))
    expected = settings.ib_expected_rate_gbps
    if expected and port.rate_gbps is not None and port.rate_gbps < expected:
        found.append((CheckStatus.WARN, f"{name} runs at {port.rate_text or port.rate_gbps} (expected {expected:g} Gb/s): degraded link"))
    for counter, limit in settings.ib_counter_limits.items():
        value = port.counters.get(counter)
        if value is not None and value > limit:
            found.append((CheckStatus.WARN, f"{name} {counter}={value} (limit {limit})"))
    if {"state", "phys_state"} <= set(port.unreadable):
        found.append((CheckStatus.WARN, f"{name}: state files unreadable"))
    return found


def check_ib(settings: NodeCheckSettings) -> CheckResult:
    """InfiniBand ports from sysfs, else ibstat; no HCA at all is UNAVAILABLE, not healthy."""
    ports = read_sysfs(settings.ib_sysfs_root)
    source = str(settings.ib_sysfs_root)
    if not ports:
        fallback, why = run_ibstat(settings.ibstat_path, settings.tool_timeout_s)
        if not fallback:
            reason = why if fallback is None else "ibstat lists no HCA"
            return CheckResult(
                name="ib", status=CheckStatus.UNAVAILABLE,
                summary=f"no InfiniBand devices under {settings.ib_sysfs_root} ({reason})",
            )
        ports, source = fallback, "ibstat"
    found = [(port, status, msg) for port in ports for status, msg in port_findings(port, settings)]
    status = worst(s for _, s, _ in found)
    details = {"source": source, "ports": [p.model_dump() for p in ports],
               "findings": [{"status": s.value, "message": m} for _, s, m in found]}
    if status is CheckStatus.OK:
        rates = sorted({p.rate_text or "?" for p in ports})
        summary = f"{len(ports)} IB port(s) ACTIVE/LinkUp ({', '.join(rates)})"
    else:
        first = next(m for _, s, m in found if s is status)
        summary = first + (f" (+{len(found) - 1} more)" if len(found) > 1 else "")
    return CheckResult(name="ib", status=status, summary=summary, details=details)
