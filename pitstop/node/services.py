"""Required systemd services: active, or the node cannot do its job.

One `systemctl show --property=Id,LoadState,ActiveState,SubState UNIT...` for all units: the
machine-readable form of `systemctl is-active` (systemctl(1): "show ... intended to be used
whenever computer-parsable output is required"). It prints one block of KEY=value lines per unit,
in the order asked, blocks separated by an empty line; LoadState=not-found means the unit is not
installed, which `is-active` cannot tell from "inactive". ActiveState values are those of
systemd.unit(5): active, reloading, inactive, failed, activating, deactivating (and maintenance,
refreshing in newer releases).

No systemd here (sd_booted(3): /run/systemd/system does not exist, as in containers) or no
systemctl is UNAVAILABLE, never a FAIL.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from pitstop.config import NodeCheckSettings
from pitstop.models import CheckResult, CheckStatus
from pitstop.node.status import NodeParseError, worst
from pitstop.node.tool import Runner, ToolTimedOut, ToolUnavailable

if TYPE_CHECKING:
    from pitstop.node.check import CheckContext

SYSTEMD_RUN_DIR = Path("/run/systemd/system")

# What a stopped service means, with the source of that meaning. Units not listed: FAIL.
SERVICE_IMPACT: dict[str, tuple[CheckStatus, str]] = {
    "slurmd.service": (CheckStatus.FAIL, "the node cannot run Slurm jobs"),
    # NVIDIA Fabric Manager user guide: on NVSwitch systems CUDA initialisation fails without it
    "nvidia-fabricmanager.service": (CheckStatus.FAIL, "CUDA cannot start on NVSwitch systems without Fabric Manager"),
    # NVIDIA driver persistence docs: without the daemon GPU state is torn down between jobs
    "nvidia-persistenced.service": (CheckStatus.WARN, "GPUs re-initialise at every job start (slow starts, lost settings)"),
}
ACTIVE_STATES: dict[str, CheckStatus] = {
    "active": CheckStatus.OK,
    "reloading": CheckStatus.OK,
    "refreshing": CheckStatus.OK,
    "activating": CheckStatus.WARN,
    "deactivating": CheckStatus.WARN,
    "maintenance": CheckStatus.WARN,
}


class UnitState(BaseModel):
    unit: str
    load_state: str | None = None
    active_state: str | None = None
    sub_state: str | None = None


def unit_name(name: str) -> str:
    return name if "." in name else f"{name}.service"


def parse_systemctl_show(text: str, units: list[str]) -> list[UnitState]:
    """Blocks of `systemctl show -p ...`, matched to `units` in order. Wrong block count raises."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise NodeParseError(f"systemctl show: not a KEY=value line: {line[:100]!r}")
        current[key.strip()] = value.strip()
    if current:
        blocks.append(current)
    if len(blocks) != len(units):
        raise NodeParseError(f"systemctl show printed {len(blocks)} block(s) for {len(units)} unit(s)")
    return [UnitState(unit=b.get("Id") or unit_name(u), load_state=b.get("LoadState"),
                      active_state=b.get("ActiveState"), sub_state=b.get("SubState"))
            for u, b in zip(units, blocks, strict=True)]


def process_services(states: list[UnitState], settings: NodeCheckSettings) -> CheckResult:
    """The verdict over the required units. Pure."""
    optional = {unit_name(u) for u in settings.optional_services}
    found: list[tuple[CheckStatus, str]] = []
    for s in states:
        impact_status, impact = SERVICE_IMPACT.get(s.unit, (CheckStatus.FAIL, "it is required on this node"))
        if s.load_state == "not-found":
            if s.unit not in optional:
                found.append((CheckStatus.WARN, f"{s.unit} is not installed (required: {impact})"))
            continue
        status = ACTIVE_STATES.get(s.active_state or "", impact_status)
        if status is not CheckStatus.OK:
            sub = f"/{s.sub_state}" if s.sub_state else ""
            found.append((status, f"{s.unit} is {s.active_state}{sub}: {impact}; "
                                  f"see `systemctl status {s.unit}` and `journalctl -u {s.unit}`"))
    status = worst(st for st, _ in found)
    details = {"units": [s.model_dump() for s in states],
               "findings": [{"status": st.value, "message": m} for st, m in found]}
    if found:
        ordered = sorted(found, key=lambda f: f[0] is not status)
        summary = ordered[0][1] + (f" (+{len(found) - 1} more)" if len(found) > 1 else "")
    else:
        active = [s.unit.removesuffix(".service") for s in states if s.load_state != "not-found"]
        summary = f"active: {', '.join(active)}" if active else "none of the required services is installed"
    return CheckResult(name="services", status=status, summary=summary[:600], details=details)


def read_states(units: list[str], runner: Runner, settings: NodeCheckSettings,
                run_dir: Path = SYSTEMD_RUN_DIR) -> list[UnitState]:
    """Raises ToolUnavailable (no systemd) or ToolTimedOut / NodeParseError."""
    if not run_dir.is_dir():
        raise ToolUnavailable(f"this node does not run systemd ({run_dir} does not exist)")
    argv = [settings.systemctl_path, "show", "--property=Id,LoadState,ActiveState,SubState", "--", *units]
    out = runner(argv, settings.tool_timeout_s)
    if out.returncode != 0:
        raise ToolUnavailable(f"systemctl show failed: {out.error_text}")
    return parse_systemctl_show(out.stdout, units)


def check(ctx: CheckContext, run_dir: Path = SYSTEMD_RUN_DIR) -> CheckResult:
    nc = ctx.settings.node_check
    units = [unit_name(u) for u in dict.fromkeys(nc.required_services)]
    if not units:
        return CheckResult(name="services", status=CheckStatus.UNAVAILABLE,
                           summary="no required services configured (node_check.required_services)")
    try:
        states = read_states(units, ctx.runner, nc, run_dir)
    except ToolUnavailable as exc:
        return CheckResult(name="services", status=CheckStatus.UNAVAILABLE, summary=str(exc))
    except (ToolTimedOut, NodeParseError) as exc:
        return CheckResult(name="services", status=CheckStatus.WARN, summary=str(exc))
    return process_services(states, nc)
