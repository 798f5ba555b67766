"""The BMC's view of the node through ipmitool: sensors now (`sdr elist`) and recent SEL events.

Formats, from ipmitool's sources (lib/ipmi_sdr.c, lib/ipmi_sel.c, include/ipmitool/ipmi_sel.h):
- `ipmitool sdr elist`: `name | NNh | status | entity.instance | reading or states`, where status
  is ok, ns (no reading), lnc/unc (non-critical), lcr/ucr (critical), lnr/unr (non-recoverable);
  `ipmitool sdr` (list) prints `name | reading | status` with nc/cr/nr. Discrete sensors (a
  PSU's status) are "ok" with their asserted states in the last column, e.g.
  "Presence detected, Failure detected". Entity 10 is a power supply, 29 a fan (IPMI 2.0
  table 43-13).
- `ipmitool sel elist`: `id | date | time | <sensor type> <sensor name> | event | Asserted|Deasserted
  [| Reading x > Threshold y unit]`; the date is %x (MM/DD/YY in the C locale; older releases
  MM/DD/YYYY), the time %X optionally followed by a zone; a record from before the BMC's clock
  was set shows ` Pre-Init  |0000000005|` instead of date and time.

Sensors judge the node now (a failed PSU, a stopped fan, a critical temperature can FAIL it);
the SEL is history, so its events in the last `ipmi_sel_lookback_h` hours are WARNs with the
evidence, never a FAIL on their own.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from pydantic import BaseModel

from pitstop.config import NodeCheckSettings
from pitstop.models import CheckResult, CheckStatus
from pitstop.node.status import NodeParseError, worst
from pitstop.node.tool import Runner, ToolTimedOut, ToolUnavailable

if TYPE_CHECKING:
    from pitstop.node.check import CheckContext

# threshold status (sdr list and sdr elist spellings) -> verdict
THRESHOLD_STATUS: dict[str, CheckStatus] = {
    "ok": CheckStatus.OK, "ns": CheckStatus.OK,  # ns: absent or not readable, common for empty slots
    "nc": CheckStatus.WARN, "lnc": CheckStatus.WARN, "unc": CheckStatus.WARN,
    "cr": CheckStatus.FAIL, "lcr": CheckStatus.FAIL, "ucr": CheckStatus.FAIL,
    "nr": CheckStatus.FAIL, "lnr": CheckStatus.FAIL, "unr": CheckStatus.FAIL,
}
# asserted discrete states (ipmi_sel.h sensor-specific offsets) -> verdict, matched as prefixes
DISCRETE_STATES: dict[str, CheckStatus] = {
    "failure detected": CheckStatus.FAIL,  # Power Supply offset 01h
    "power supply ac lost": CheckStatus.FAIL,  # 03h: that PSU delivers nothing
    "ac lost or out-of-range": CheckStatus.FAIL,  # 04h
    "ac out-of-range, but present": CheckStatus.WARN,  # 05h
    "predictive failure": CheckStatus.WARN,  # 02h
    "config error": CheckStatus.WARN,  # 06h: mismatched PSUs
    "redundancy lost": CheckStatus.WARN,  # generic redundancy event: one more failure and it is down
    "critical overtemperature": CheckStatus.FAIL,  # Memory offset 0Ah
    "uncorrectable ecc": CheckStatus.FAIL,  # Memory offset 01h
}
# (sensor type prefix, event prefix, what it is) of SEL events worth reporting; "" matches any type
SEL_EVENTS: tuple[tuple[str, str, str], ...] = (
    ("Power Supply", "Failure detected", "PSU failure"),
    ("Power Supply", "Power Supply AC lost", "PSU lost AC input"),
    ("Power Supply", "AC lost or out-of-range", "PSU lost AC input"),
    ("Power Supply", "Predictive failure", "PSU predicted to fail"),
    ("", "Redundancy Lost", "redundancy lost"),
    ("Fan", "Lower Critical going low", "fan below critical speed"),
    ("Fan", "Lower Non-recoverable going low", "fan stopped"),
    ("Temperature", "Upper Critical going high", "over-temperature"),
    ("Temperature", "Upper Non-recoverable going high", "over-temperature"),
    ("Processor", "Thermal Trip", "CPU thermal trip"),
    ("Memory", "Uncorrectable ECC", "uncorrectable memory error"),
    ("Memory", "Critical Overtemperature", "memory over-temperature"),
)


class Sensor(BaseModel):
    name: str
    status: str
    entity: str | None = None
    reading: str = ""
    category: str = "other"


class SelEvent(BaseModel):
    record: str
    when: datetime | None  # None: Pre-Init or unparsable timestamp
    sensor: str
    event: str
    asserted: bool
    extra: str = ""


def _category(name: str, entity: str | None, reading: str) -> str:
    lowered = name.lower()
    if (entity or "").startswith("10.") or re.search(r"\bpsu?\s*\d|power\s*supply|\bpsu", lowered):
        return "psu"
    if (entity or "").startswith("29.") or "fan" in lowered or reading.endswith("RPM"):
        return "fan"
    if "temp" in lowered or "degrees" in reading:
        return "temperature"
    return "other"


def parse_sdr(text: str) -> list[Sensor]:
    """`ipmitool sdr elist` (5 columns) or `ipmitool sdr` (3 columns). Garbage raises."""
    sensors: list[Sensor] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cols = [c.strip() for c in line.split("|")]
        if len(cols) == 5:
            name, _, status, entity, reading = cols
        elif len(cols) == 3:
            name, reading, status = cols
            entity = None
        else:
            continue  # ipmitool prints progress lines and warnings between records on some BMCs
        if status.lower() not in THRESHOLD_STATUS:
            raise NodeParseError(f"ipmitool sdr: unknown sensor status {status!r} in {line.strip()[:100]!r}")
        sensors.append(Sensor(name=name, status=status.lower(), entity=entity, reading=reading,
                              category=_category(name, entity, reading)))
    if text.strip() and not sensors:
        raise NodeParseError(f"ipmitool sdr printed no sensor lines: {text.strip()[:100]!r}")
    return sensors


def _sel_time(date: str, time: str) -> datetime | None:
    clock = time.split()[0] if time.split() else ""
    for fmt in ("%m/%d/%Y %H:%M:%S", "%m/%d/%y %H:%M:%S"):
        try:
            return datetime.strptime(f"{date} {clock}", fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def parse_sel(text: str) -> list[SelEvent]:
    """`ipmitool sel elist` lines. "SEL has no entries" gives []."""
    events: list[SelEvent] = []
    for line in text.splitlines():
        cols = [c.strip() for c in line.split("|")]
        if len(cols) < 6:
            continue  # "SEL has no entries", OEM records with fewer columns
        record, date, time, sensor, event, direction, *extra = cols
        if direction not in ("Asserted", "Deasserted"):
            continue
        when = None if date == "Pre-Init" else _sel_time(date, time)
        events.append(SelEvent(record=record, when=when, sensor=sensor, event=event,
                               asserted=direction == "Asserted", extra=" | ".join(extra)))
    if text.strip() and not events and "no entries" not in text.lower():
        raise NodeParseError(f"ipmitool sel elist printed no event lines: {text.strip()[:100]!r}")
    return events


def sensor_findings(sensors: list[Sensor]) -> list[tuple[CheckStatus, str]]:
    found: list[tuple[CheckStatus, str]] = []
    for s in sensors:
        status = THRESHOLD_STATUS[s.status]
        if status is not CheckStatus.OK:
            found.append((status, f"{s.category if s.category != 'other' else 'sensor'} {s.name} is {s.status}"
                                  f" ({s.reading or 'no reading'})"))
        for state in (part.strip() for part in s.reading.split(",")):
            for prefix, verdict in DISCRETE_STATES.items():
                if state.lower().startswith(prefix):
                    found.append((verdict, f"{s.name}: {state}"))
    return found


def sel_findings(events: list[SelEvent], now: datetime, lookback: timedelta) -> list[tuple[CheckStatus, str]]:
    found: list[tuple[CheckStatus, str]] = []
    for e in events:
        if not e.asserted or e.when is None or abs(now - e.when) > lookback:
            continue
        for type_prefix, event_prefix, what in SEL_EVENTS:
            if e.sensor.startswith(type_prefix) and e.event.startswith(event_prefix):
                found.append((CheckStatus.WARN, f"SEL {e.when:%Y-%m-%d %H:%M}: {what} ({e.sensor}: {e.event})"))
                break
    return found


def process_ipmi(sdr: str | None, sel: str | None, now: datetime, settings: NodeCheckSettings,
                 unavailable: str = "") -> CheckResult:
    """The verdict from `sdr elist` and `sel elist` output (None: that one could not be read). Pure."""
    if sdr is None and sel is None:
        return CheckResult(name="ipmi", status=CheckStatus.UNAVAILABLE,
                           summary=unavailable or "ipmitool output unavailable")
    found: list[tuple[CheckStatus, str]] = []
    details: dict = {}
    for label, text, parse in (("sensors", sdr, parse_sdr), ("sel", sel, parse_sel)):
        if text is None:
            continue
        try:
            items = parse(text)
        except NodeParseError as exc:
            found.append((CheckStatus.WARN, str(exc)))
            continue
        if label == "sensors":
            details["sensors"] = len(items)
            found += sensor_findings(items)
        else:
            details["sel_entries"] = len(items)
            found += sel_findings(items, now, timedelta(hours=settings.ipmi_sel_lookback_h))
    status = worst(s for s, _ in found)
    details["findings"] = [{"status": s.value, "message": m} for s, m in found]
    if unavailable:
        details["unavailable"] = unavailable
    if found:
        ordered = sorted(found, key=lambda f: f[0] is not status)
        summary = ordered[0][1] + (f" (+{len(found) - 1} more)" if len(found) > 1 else "")
    else:
        parts = []
        if "sensors" in details:
            parts.append(f"{details['sensors']} BMC sensor(s) ok")
        if "sel_entries" in details:
            parts.append(f"no PSU/fan/temperature SEL events in {settings.ipmi_sel_lookback_h:g} h")
        summary = ", ".join(parts) + (f" ({unavailable})" if unavailable else "")
    return CheckResult(name="ipmi", status=status, summary=summary[:600], details=details)


def _ipmitool(runner: Runner, settings: NodeCheckSettings, *args: str) -> tuple[str | None, str]:
    try:
        out = runner([settings.ipmitool_path, *args], settings.ipmi_timeout_s)
    except (ToolUnavailable, ToolTimedOut) as exc:
        return None, str(exc)
    if out.returncode != 0:  # e.g. "Could not open device at /dev/ipmi0 ...": no BMC driver here
        return None, f"ipmitool {' '.join(args)}: {out.error_text}"
    return out.stdout, ""


def check(ctx: CheckContext) -> CheckResult:
    nc = ctx.settings.node_check
    sdr, why_sdr = _ipmitool(ctx.runner, nc, "sdr", "elist")
    if sdr is None and ("not installed" in why_sdr or "Could not open device" in why_sdr):
        return process_ipmi(None, None, datetime.now(UTC), nc, why_sdr)  # no point asking for the SEL
    sel, why_sel = _ipmitool(ctx.runner, nc, "sel", "elist")
    return process_ipmi(sdr, sel, datetime.now(UTC), nc, "; ".join(w for w in (why_sdr, why_sel) if w))
