"""Classifier rows for `NVRM: Xid` lines, derived from the one Xid catalog in `pitstop.node.xid`.

The catalog (NVIDIA's Xid Catalog) says what each Xid implicates and NVIDIA's immediate action;
this module only maps those two facts onto a cause and a priority band, so a new Xid is one row
in the catalog, not an edit here. Xids sharing a (cause, priority) form one rule, `xid-{1}`.
"""

from __future__ import annotations

from collections import defaultdict

from pitstop.models import Cause
from pitstop.node.xid import XID_CATALOG, Implicates, XidInfo

from classifiers.rule_model import Rule

# NVRM Xid line prefix: "NVRM: Xid (PCI:0000:3b:00): 79, ..." (older drivers omit "PCI:").
XID_PREFIX = r"Xid \([^\n)]{0,40}\): ?"
# The bare form fleet monitors and providers' health events print: "Xid 149, NETIR_LINK_DOWN ...",
# "Xid: 79, GPU has fallen off the bus". The number must be followed by a comma (prose such as
# "no Xid 79 since" is not an event).
BARE_XID_PREFIX = r"\bXid:? "
# NVIDIA's k8s device plugin (and the GPU Operator that runs it) reports the Xids it watches through
# NVML's events: "XidCriticalError: Xid=79 on Device=GPU-..., marking device as unhealthy".
DEVICE_PLUGIN_XID_PREFIX = r"XidCriticalError: Xid="
# The reason an admin or a health check set on a node taken out of service, as the scheduler prints
# it: Slurm's `Reason=Xid 79 ...` (scontrol show node), PBS's `offline,resv-exclusive Xid 74 --
# GPUs need reseat` (pbsnodes -l). Reason=, or the node's state (with its comma- or plus-joined
# qualifiers) right before the reason; no free gap, which would cost every "down" or "fail" in a
# log a scan per Xid band in the pure-`re` engine.
NODE_REASON_XID_PREFIX = r"(?:Reason=|\b(?:offline|drain|drained|draining|down|fail)[A-Za-z,+_-]{0,40}[ \t]+)Xid:? "


def xid_pattern(numbers: str) -> str:
    """Any Xid form for `numbers` (a regex alternation); the number is the first group that matched."""
    return (f"{XID_PREFIX}({numbers})\\b|{BARE_XID_PREFIX}({numbers}),|{DEVICE_PLUGIN_XID_PREFIX}({numbers})\\b"
            f"|{NODE_REASON_XID_PREFIX}({numbers})\\b")

CAUSE_OF: dict[Implicates, Cause] = {
    Implicates.HARDWARE: Cause.GPU_HARDWARE,
    Implicates.MEMORY: Cause.GPU_MEMORY,
    Implicates.NVLINK: Cause.GPU_HARDWARE,
    Implicates.DRIVER: Cause.GPU_HARDWARE,  # driver/firmware/GSP faults are handled like the GPU
    Implicates.APP: Cause.SOFTWARE_BUG,  # the program faulted on the GPU; the node is fine
    Implicates.SYMPATHETIC: Cause.GPU_HARDWARE,
    Implicates.INFO: Cause.GPU_HARDWARE,
}

# NVIDIA's immediate action -> priority. The GPU needing a reset/reboot is a root cause that
# beats everything it drags down (NCCL timeouts, lost nodes); an Xid NVIDIA says to IGNORE, or
# one that only echoes another Xid, is weak evidence that never outranks a real failure.
ACTION_PRIORITY: dict[str, int] = {
    "RESTART_BM": 100,
    "WORKFLOW_XID_48": 100,
    "RESET_GPU": 98,
    "WORKFLOW_NVLINK_ERR": 98,
    "WORKFLOW_NVLINK5_ERR": 97,
    "CHECK_MECHANICALS": 97,
    "RESTART_APP": 93,
    "CONTACT_SUPPORT": 92,
    "RESTART_VM": 91,
    "IGNORE": 26,
    "WORKFLOW_XID_45": 26,
    "XID_154": 26,
}
APP_PRIORITY = 46  # an app-implicating Xid is a software fault: just above the specific exceptions
WEAK = 26

HINTS: dict[tuple[Cause, bool], str] = {
    (Cause.GPU_HARDWARE, True): "GPU/driver fault (NVIDIA: reset the GPU or reboot): drain the node, reset; RMA if it recurs",
    (Cause.GPU_HARDWARE, False): "GPU/driver error the job died of: restart elsewhere; drain the node if it repeats there",
    (Cause.GPU_MEMORY, True): "GPU memory (ECC/row-remap) fault: drain the node, reset the GPU, check remapped rows; RMA if it fails",
    (Cause.GPU_MEMORY, False): "GPU memory error killed the job: requeue elsewhere; drain if it repeats on this GPU",
    (Cause.SOFTWARE_BUG, False): "the program faulted on the GPU (bad address/push buffer): user bug, the node is fine",
}
WEAK_HINT = "Xid that NVIDIA marks informational/sympathetic: look for the Xid or error before it"


def _band(info: XidInfo) -> tuple[Cause, int]:
    cause = CAUSE_OF[info.implicates]
    priority = ACTION_PRIORITY.get(info.immediate, 92)
    if cause is Cause.SOFTWARE_BUG:
        return cause, min(priority, APP_PRIORITY)
    return cause, priority


def xid_rules() -> tuple[Rule, ...]:
    """One rule per (cause, priority) band of the catalog, strongest first."""
    bands: dict[tuple[Cause, int], list[int]] = defaultdict(list)
    for xid, info in sorted(XID_CATALOG.items()):
        bands[_band(info)].append(xid)
    rows = []
    for (cause, priority), xids in sorted(bands.items(), key=lambda kv: (-kv[0][1], kv[0][0].value)):
        hint = WEAK_HINT if priority <= WEAK else HINTS.get((cause, priority >= 97), HINTS[(Cause.GPU_HARDWARE, False)])
        if len(xids) == 1:  # a band of one Xid can name it, in the catalog's words
            hint = f"Xid {xids[0]} ({XID_CATALOG[xids[0]].description}): {hint}"
        rows.append(
            Rule.built_in(
                signature="xid-{1}", cause=cause, priority=priority, hint=hint,
                pattern=xid_pattern("|".join(str(x) for x in xids)),
                confidence=0.9 if priority > WEAK else 0.5,
            )
        )
    return tuple(rows)
