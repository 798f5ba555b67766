"""NVMe drive health: the SMART / Health Information log (log page 02h) of every controller.

Controllers are listed from sysfs (/sys/class/nvme/nvme<N>/, with `model`, `serial` and `state`:
"live", "resetting", "dead"... from drivers/nvme/host/core.c). Each one's log is read with
`nvme smart-log /dev/nvmeN -o json` (nvme-cli), else `smartctl -j -H -A /dev/nvmeN`
(smartmontools). Both JSON layouts, from the tools' sources:
- nvme-cli (src/nvme-print-json.c, json_smart_log): top-level "critical_warning" (an int, or with
  --verbose an object whose "value" is the int), "temperature" in kelvin, "avail_spare",
  "spare_thresh", "percent_used", "media_errors", "num_err_log_entries" (128-bit counters are
  printed as bare numbers; old 1.x releases printed some as floats).
- smartctl (src/nvmeprint.cpp, print_smart_log): "nvme_smart_health_information_log" with
  "critical_warning", "temperature" in Celsius, "available_spare", "available_spare_threshold",
  "percentage_used", "media_errors", "num_err_log_entries"; "smartctl": {"exit_status",
  "messages"}. The exit status is a bitmask (smartctl(8), EXIT STATUS): bits 0-2 mean the
  command or device failed, bit 3 "disk failing".

Critical-warning bits are those of the NVMe Base Specification (SMART / Health Information log,
byte 0); `CRITICAL_WARNING_BITS` says what each means for a node.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from pitstop.config import NodeCheckSettings
from pitstop.models import CheckResult, CheckStatus
from pitstop.node.status import NodeParseError, worst
from pitstop.node.tool import Runner, ToolOutput, ToolTimedOut, ToolUnavailable

if TYPE_CHECKING:
    from pitstop.node.check import CheckContext

# bit -> (meaning, verdict). Reliability degraded and read-only media break jobs that write
# checkpoints or scratch; the others are early warnings.
CRITICAL_WARNING_BITS: dict[int, tuple[str, CheckStatus]] = {
    0x01: ("available spare below threshold: replace the drive soon", CheckStatus.WARN),
    0x02: ("temperature outside its thresholds", CheckStatus.WARN),
    0x04: ("NVM subsystem reliability degraded (media or internal errors)", CheckStatus.FAIL),
    0x08: ("media placed in read-only mode", CheckStatus.FAIL),
    0x10: ("volatile memory backup device failed (data at risk on power loss)", CheckStatus.WARN),
    0x20: ("persistent memory region read-only or unreliable", CheckStatus.WARN),
}
# controller states from the kernel NVMe driver; anything but "live" means I/O is not flowing
CONTROLLER_STATES: dict[str, CheckStatus] = {
    "live": CheckStatus.OK,
    "new": CheckStatus.WARN,
    "connecting": CheckStatus.WARN,
    "resetting": CheckStatus.WARN,
    "deleting": CheckStatus.FAIL,
    "deleting (no IO)": CheckStatus.FAIL,
    "dead": CheckStatus.FAIL,
}


class NvmeHealth(BaseModel):
    device: str
    source: str = Field(description="nvme-cli | smartctl")
    model: str | None = None
    serial: str | None = None
    state: str | None = None
    critical_warning: int = 0
    temperature_c: int | None = None
    available_spare: int | None = None
    spare_threshold: int | None = None
    percentage_used: int | None = None
    media_errors: int | None = None
    error_log_entries: int | None = None


def _int(value: Any, what: str) -> int | None:
    """A JSON counter: int, float (nvme-cli 1.x) or numeric string. None stays None."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise NodeParseError(f"{what} is a boolean, not a number")
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        try:
            return int(float(value.replace(",", "")))
        except ValueError:
            pass
    raise NodeParseError(f"{what} is not a number: {str(value)[:40]!r}")


def _load(text: str, tool: str) -> dict:
    start = text.find("{")
    if start < 0:
        raise NodeParseError(f"{tool} printed no JSON document")
    try:
        doc = json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise NodeParseError(f"{tool} JSON is truncated or corrupt: {exc.msg} at char {exc.pos}") from exc
    if not isinstance(doc, dict):
        raise NodeParseError(f"{tool} JSON is not an object")
    return doc


def parse_nvme_cli(text: str, device: str) -> NvmeHealth:
    """`nvme smart-log DEV -o json` (nvme-cli 1.x and 2.x, --verbose too)."""
    doc = _load(text, "nvme smart-log")
    if "critical_warning" not in doc:
        raise NodeParseError(f"nvme smart-log JSON has no critical_warning (keys: {sorted(doc)[:6]})")
    warning = doc["critical_warning"]
    if isinstance(warning, dict):  # --verbose: {"value": N, "available_spare": 0, ...}
        warning = warning.get("value")
    kelvin = _int(doc.get("temperature"), "temperature")
    return NvmeHealth(
        device=device, source="nvme-cli",
        critical_warning=_int(warning, "critical_warning") or 0,
        temperature_c=kelvin - 273 if kelvin else None,
        available_spare=_int(doc.get("avail_spare"), "avail_spare"),
        spare_threshold=_int(doc.get("spare_thresh"), "spare_thresh"),
        percentage_used=_int(doc.get("percent_used", doc.get("percentage_used")), "percent_used"),
        media_errors=_int(doc.get("media_errors"), "media_errors"),
        error_log_entries=_int(doc.get("num_err_log_entries"), "num_err_log_entries"),
    )


def parse_smartctl(text: str, device: str) -> NvmeHealth:
    """`smartctl -j -H -A DEV` for an NVMe device. Device not opened: ToolUnavailable; no log: NodeParseError."""
    doc = _load(text, "smartctl")
    log = doc.get("nvme_smart_health_information_log")
    if not isinstance(log, dict):
        meta = doc.get("smartctl") if isinstance(doc.get("smartctl"), dict) else {}
        messages = [m.get("string", "") for m in meta.get("messages") or [] if isinstance(m, dict)]
        why = "; ".join(m for m in messages if m) or f"exit status {meta.get('exit_status', '?')}"
        if isinstance(meta.get("exit_status"), int) and meta["exit_status"] & 0x02:
            # bit 1: device open failed (smartctl(8)), e.g. not root: no verdict on the drive
            raise ToolUnavailable(f"smartctl cannot open {device}: {why[:200]}")
        raise NodeParseError(f"smartctl returned no NVMe health log for {device}: {why[:200]}")
    return NvmeHealth(
        device=device, source="smartctl",
        model=doc.get("model_name"), serial=doc.get("serial_number"),
        critical_warning=_int(log.get("critical_warning"), "critical_warning") or 0,
        temperature_c=_int(log.get("temperature"), "temperature"),
        available_spare=_int(log.get("available_spare"), "available_spare"),
        spare_threshold=_int(log.get("available_spare_threshold"), "available_spare_threshold"),
        percentage_used=_int(log.get("percentage_used"), "percentage_used"),
        media_errors=_int(log.get("media_errors"), "media_errors"),
        error_log_entries=_int(log.get("num_err_log_entries"), "num_err_log_entries"),
    )


def drive_findings(drive: NvmeHealth, settings: NodeCheckSettings) -> list[tuple[CheckStatus, str]]:
    """What is wrong with one drive. Pure."""
    name = f"{drive.device}" + (f" ({drive.model})" if drive.model else "")
    found: list[tuple[CheckStatus, str]] = []
    if drive.state is not None:
        state_status = CONTROLLER_STATES.get(drive.state, CheckStatus.WARN)
        if state_status is not CheckStatus.OK:
            found.append((state_status, f"{name}: controller state {drive.state} (want live)"))
    for bit, (meaning, status) in CRITICAL_WARNING_BITS.items():
        if drive.critical_warning & bit:
            found.append((status, f"{name}: critical warning 0x{bit:02x}, {meaning}"))
    unknown = drive.critical_warning & ~sum(CRITICAL_WARNING_BITS)
    if unknown:
        found.append((CheckStatus.WARN, f"{name}: unknown critical warning bits 0x{unknown:02x}"))
    errors = drive.media_errors
    if errors is not None:
        fail = settings.nvme_media_errors_fail
        if fail is not None and errors > fail:
            found.append((CheckStatus.FAIL, f"{name}: {errors} media and data integrity errors (fail above {fail})"))
        elif errors > settings.nvme_media_errors_warn:
            found.append((CheckStatus.WARN, f"{name}: {errors} media and data integrity errors "
                                            f"(warn above {settings.nvme_media_errors_warn})"))
    used = drive.percentage_used
    if used is not None:
        fail = settings.nvme_percentage_used_fail
        if fail is not None and used >= fail:
            found.append((CheckStatus.FAIL, f"{name}: {used}% of rated life used (fail at {fail}%)"))
        elif used >= settings.nvme_percentage_used_warn:
            found.append((CheckStatus.WARN, f"{name}: {used}% of rated life used "
                                            f"(warn at {settings.nvme_percentage_used_warn}%): plan a replacement"))
    return found


def process_nvme(drives: list[NvmeHealth], problems: list[tuple[CheckStatus, str]],
                 settings: NodeCheckSettings) -> CheckResult:
    """The verdict over every drive; `problems` are drives that could not be read. Pure."""
    if not drives:
        reasons = "; ".join(m for _, m in problems) or "no NVMe controllers on this node"
        status = worst(s for s, _ in problems) if problems else CheckStatus.UNAVAILABLE
        return CheckResult(name="nvme", status=status if status is not CheckStatus.OK else CheckStatus.UNAVAILABLE,
                           summary=reasons[:600], details={"problems": [m for _, m in problems]})
    found = [f for d in drives for f in drive_findings(d, settings)] + problems
    status = worst(s for s, _ in found)
    details = {"drives": [d.model_dump() for d in drives],
               "findings": [{"status": s.value, "message": m} for s, m in found]}
    bad = [(s, m) for s, m in found if s is not CheckStatus.OK and s is not CheckStatus.UNAVAILABLE]
    if bad:
        first = next(m for s, m in bad if s is status)  # bad is not empty: status is WARN or FAIL
        summary = first + (f" (+{len(bad) - 1} more)" if len(bad) > 1 else "")
    else:
        worn = max((d.percentage_used or 0 for d in drives), default=0)
        summary = f"{len(drives)} NVMe drive(s) healthy (max {worn}% life used)"
        if problems:
            summary += f"; {len(problems)} not readable: {problems[0][1]}"
    return CheckResult(name="nvme", status=status, summary=summary[:600], details=details)


def list_controllers(sysfs_root: Path) -> list[dict[str, str | None]]:
    """NVMe controllers from /sys/class/nvme: name, model, serial, state."""
    base = sysfs_root / "class" / "nvme"
    try:
        names = sorted((p.name for p in base.iterdir() if p.name.startswith("nvme")),
                       key=lambda n: (len(n), n))
    except OSError:
        return []

    def attr(name: str, key: str) -> str | None:
        try:
            return (base / name / key).read_text(errors="replace").strip()[:200] or None
        except OSError:
            return None

    return [{"name": n, "model": attr(n, "model"), "serial": attr(n, "serial"), "state": attr(n, "state")}
            for n in names]


def read_drive(device: str, runner: Runner, settings: NodeCheckSettings, timeout_s: float | None = None) -> NvmeHealth:
    """One controller's health log via nvme-cli, else smartctl. Raises ToolUnavailable/TimedOut/NodeParseError."""
    attempts: list[tuple[list[str], Any]] = [
        ([settings.nvme_path, "smart-log", device, "-o", "json"], parse_nvme_cli),
        ([settings.smartctl_path, "-j", "-H", "-A", device], parse_smartctl),
    ]
    why: list[str] = []
    for argv, parse in attempts:
        try:
            out: ToolOutput = runner(argv, timeout_s or settings.tool_timeout_s)
        except ToolUnavailable as exc:
            why.append(str(exc))
            continue
        if parse is parse_nvme_cli and out.returncode != 0:
            why.append(f"nvme smart-log {device}: {out.error_text}")
            continue
        return parse(out.stdout, device)  # smartctl: JSON even on a nonzero (bitmask) status
    raise ToolUnavailable("; ".join(why))


def check(ctx: CheckContext) -> CheckResult:
    nc = ctx.settings.node_check
    controllers = list_controllers(nc.sysfs_root)
    if not controllers:
        return process_nvme([], [], nc)
    drives: list[NvmeHealth] = []
    problems: list[tuple[CheckStatus, str]] = []
    # one budget for all drives: eight hung controllers must not hold the health sweep for 80 s
    deadline = time.monotonic() + 2 * nc.tool_timeout_s
    for ctrl in controllers:
        device = f"/dev/{ctrl['name']}"
        left = deadline - time.monotonic()
        if left <= 0:
            problems.append((CheckStatus.WARN, f"{device}: not read, the nvme check ran out of time"))
            continue
        try:
            drive = read_drive(device, ctx.runner, nc, min(left, nc.tool_timeout_s))
        except ToolUnavailable as exc:
            problems.append((CheckStatus.UNAVAILABLE, f"{device}: {exc}"))
            if ctrl["state"] and ctrl["state"] != "live":  # the sysfs state alone is a verdict
                drives.append(NvmeHealth(device=device, source="sysfs", model=ctrl["model"], state=ctrl["state"]))
            continue
        except ToolTimedOut as exc:
            problems.append((CheckStatus.WARN, f"{device}: {exc} (controller hung?)"))
            continue
        except NodeParseError as exc:
            problems.append((CheckStatus.WARN, f"{device}: {exc}"))
            continue
        drive.model = drive.model or ctrl["model"]
        drive.serial = drive.serial or ctrl["serial"]
        drive.state = ctrl["state"]
        drives.append(drive)
    return process_nvme(drives, problems, nc)
