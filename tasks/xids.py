"""Count a node's kernel-log Xids once, in the store, and turn the new ones into node alarms.

The ONE counting path for flows is the store (`records.record_xids`: per-node watermark by boot
id + dmesg timestamp, and a unique key per line). The node-local watermark file of
`pitstop node-check` (pitstop/node/kernel_log.py) only decides what that check reports when run
on its own (prolog, by hand); it is per *host user*, so on a shared host or after a reinstall it
would disagree with the store. The sweep therefore ignores node-check's `xid` result and counts
here; lemon signals, damping and the ladder all read what this path stored.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from classifiers.xid_rules import CAUSE_OF
from pitstop.cluster.base import HostStatus
from pitstop.models import Cause
from pitstop.node.xid import XID_CATALOG, parse_kernel_log
from pitstop.store import records
from tasks.context import PipelineContext

BOOT_ID_ARGV = ["cat", "/proc/sys/kernel/random/boot_id"]
_BOOT_ID_CHARS = frozenset("0123456789abcdef-")


class XidAlarm(BaseModel):
    """A node alarm for one Xid counted for the first time (what node_alarm is started with)."""

    node: str
    alarm: str = Field(description="xid-<n>")
    details: dict


def observations(kernel_text: str, boot_id: str) -> list[records.XidObservation]:
    """Xid lines as store observations. Lines without a usable time are skipped: without one the
    store cannot tell a rescan from a new occurrence."""
    out = []
    for e in parse_kernel_log(kernel_text).events:
        ts = e.uptime_s if e.uptime_s is not None else (e.timestamp.timestamp() if e.timestamp else None)
        if ts is None:
            continue
        out.append(records.XidObservation(xid=e.xid, kernel_ts=ts, boot_id=boot_id, pci=e.pci_bus or "", line=e.raw))
    return out


def cause_of(xid: int) -> Cause:
    info = XID_CATALOG.get(xid)
    return CAUSE_OF.get(info.implicates, Cause.GPU_HARDWARE) if info else Cause.GPU_HARDWARE


def alarm_for(node: str, boot_id: str, obs: records.XidObservation) -> XidAlarm:
    # The key names the line itself: however often it is swept, one incident.
    key = f"xid-{obs.xid}@{boot_id or 'noboot'}:{obs.kernel_ts:.6f}:{obs.pci or '-'}"
    return XidAlarm(node=node, alarm=f"xid-{obs.xid}", details={
        "cause": cause_of(obs.xid).value, "signature": f"xid-{obs.xid}", "key": key,
        "lines": [obs.line[:500]], "confidence": 0.95,
    })


def count_node_xids(ctx: PipelineContext, nodes: list[str]) -> tuple[dict[str, list[XidAlarm]], dict[str, str]]:
    """(node -> alarms for Xids never counted before, node -> why its log could not be read)."""
    p = ctx.settings.pipeline
    logs = ctx.runner.fan_out(nodes, p.kernel_log_argv, p.node_check_timeout_s)
    boots = ctx.runner.fan_out(nodes, BOOT_ID_ARGV, p.node_check_timeout_s)
    alarms: dict[str, list[XidAlarm]] = {}
    problems: dict[str, str] = {}
    for log, boot in zip(logs, boots):
        if log.status is not HostStatus.OK or log.exit_code != 0:
            problems[log.host] = f"kernel log unreadable: {log.error or (log.stderr or '').strip()[:200] or log.exit_code}"
            continue
        boot_id = boot.stdout.strip() if boot.status is HostStatus.OK and boot.exit_code == 0 else ""
        if not boot_id or set(boot_id) - _BOOT_ID_CHARS:
            boot_id = ""  # unknown boot: the store's unique key still counts each line once
        obs = observations(log.stdout, boot_id)
        if not obs:
            continue
        counted = records.record_xids(ctx.store, ctx.cluster_name, log.host, obs)
        # One alarm per Xid number and sweep (keyed by its newest line), its new lines as evidence:
        # a burst of 50 identical lines is one occurrence for damping and the ladder, not 50.
        by_xid: dict[int, list[records.XidObservation]] = {}
        for o in counted.new:
            by_xid.setdefault(o.xid, []).append(o)
        for same in by_xid.values():
            alarm = alarm_for(log.host, boot_id, same[-1])
            alarm.details["lines"] = [o.line[:500] for o in same[-10:]]
            alarms.setdefault(log.host, []).append(alarm)
    return alarms, problems
