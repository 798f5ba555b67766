"""NVIDIA Xid catalog (one data table) and a pure parser for kernel-log Xid lines.

The catalog rows are NVIDIA's "Xid Catalog" for Ampere and newer GPUs
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html): mnemonic, description,
the immediate and investigatory "resolution bucket". `implicates` is Pitstop's grouping for root
cause routing. Reading the log (journalctl/dmesg) and the watermark live in `kernel_log.py`.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import NamedTuple

from pydantic import BaseModel, Field

from pitstop.models import CheckStatus

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"


class Implicates(StrEnum):
    HARDWARE = "hardware"  # GPU board, PCIe, power
    MEMORY = "memory"  # GPU DRAM/SRAM ECC, row remapping
    NVLINK = "nvlink"
    APP = "app"  # the user's program; the node is fine
    DRIVER = "driver"  # driver / firmware / GSP
    SYMPATHETIC = "sympathetic"  # a consequence of another Xid
    INFO = "info"


class XidInfo(NamedTuple):
    mnemonic: str
    description: str
    immediate: str  # NVIDIA resolution bucket, e.g. RESTART_APP, RESET_GPU, RESTART_BM
    investigatory: str
    implicates: Implicates


_H, _M, _N, _A, _D, _S, _I = (
    Implicates.HARDWARE,
    Implicates.MEMORY,
    Implicates.NVLINK,
    Implicates.APP,
    Implicates.DRIVER,
    Implicates.SYMPATHETIC,
    Implicates.INFO,
)

# fmt: off
XID_CATALOG: dict[int, XidInfo] = {
    8:   XidInfo("ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", "RESTART_APP", "CONTACT_SUPPORT", _D),
    11:  XidInfo("ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "Invalid or corrupted push buffer stream", "RESTART_APP", "CHECK_APP/CUDA", _A),
    13:  XidInfo("ROBUST_CHANNEL_GR_EXCEPTION", "Graphics Engine Exception", "RESTART_APP", "WORKFLOW_XID_13", _A),
    25:  XidInfo("ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "Invalid or illegal push buffer stream", "RESTART_APP", "CHECK_APP/CUDA", _A),
    31:  XidInfo("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", "RESTART_APP", "WORKFLOW_XID_31", _A),
    # the catalog notes 32 is "primarily quality issues on PCI", not the application
    32:  XidInfo("ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream", "RESTART_APP", "CHECK_APP/CUDA", _H),
    37:  XidInfo("ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "Driver firmware error", "IGNORE", "CHECK_APP/CUDA", _D),
    38:  XidInfo("ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "Driver firmware error", "IGNORE", "CONTACT_SUPPORT", _D),
    39:  XidInfo("ROBUST_CHANNEL_CE0_ERROR", "Copy Engine Exception", "RESTART_APP", "CONTACT_SUPPORT", _D),
    40:  XidInfo("ROBUST_CHANNEL_CE1_ERROR", "Copy Engine Exception", "RESTART_APP", "CONTACT_SUPPORT", _D),
    41:  XidInfo("ROBUST_CHANNEL_CE2_ERROR", "Copy Engine Exception", "RESTART_APP", "CONTACT_SUPPORT", _D),
    43:  XidInfo("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", "IGNORE", "CONTACT_SUPPORT", _A),
    44:  XidInfo("ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "Graphics Engine fault during context switch", "IGNORE", "CONTACT_SUPPORT", _D),
    45:  XidInfo("ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup, due to previous errors", "WORKFLOW_XID_45", "Solo: RESTART_FM; not solo: IGNORE (follow other Xid)", _S),
    46:  XidInfo("ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", "RESET_GPU", "CONTACT_SUPPORT", _H),
    48:  XidInfo("ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", "WORKFLOW_XID_48", "WORKFLOW_XID_48", _M),
    54:  XidInfo("SILENT_RUNNING_PWR_REDUCED_CLOCKING", "Auxiliary power is not connected to the GPU board", "CHECK_MECHANICALS", "CONTACT_SUPPORT", _H),
    60:  XidInfo("ROBUST_CHANNEL_SEC2_ERROR", "Video processor exception", "RESTART_APP", "INVESTIGATE_SW", _D),
    # marked "Unused" for Ampere and newer; older GPUs logged micro-controller breakpoints here
    61:  XidInfo("PMU_BREAKPOINT", "Internal micro-controller breakpoint/warning (unused on Ampere+)", "CONTACT_SUPPORT", "N/A", _D),
    62:  XidInfo("PMU_HALT_ERROR", "Internal micro-controller halt", "RESET_GPU", "CONTACT_SUPPORT", _H),
    63:  XidInfo("INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", "IGNORE", "IGNORE", _M),
    64:  XidInfo("INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", "RESET_GPU", "CONTACT_SUPPORT", _M),
    68:  XidInfo("ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 Exception", "RESTART_APP", "CONTACT_SUPPORT", _D),
    69:  XidInfo("ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", "RESTART_APP", "CHECK_APP/CUDA", _A),
    74:  XidInfo("NVLINK_ERROR", "NVLINK Error", "WORKFLOW_NVLINK_ERR", "CONTACT_SUPPORT", _N),
    79:  XidInfo("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM", "CONTACT_SUPPORT", _H),
    80:  XidInfo("PBDMA_PUSHBUFFER_CRC_MISMATCH", "Corrupted data sent to GPU", "RESTART_APP", "CHECK_APP/CUDA", _A),
    92:  XidInfo("EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", "IGNORE", "CONTACT_SUPPORT", _M),
    94:  XidInfo("ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error", "RESTART_APP", "IGNORE (sympathetic)", _M),
    95:  XidInfo("ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", "RESET_GPU", "IGNORE (sympathetic)", _M),
    109: XidInfo("ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context Switch Timeout Error", "RESET_GPU", "CONTACT_SUPPORT", _H),
    110: XidInfo("SEC_FAULT_ERROR", "Security Fault Error", "RESET_GPU", "INVESTIGATE_SW", _H),
    119: XidInfo("GSP_RPC_TIMEOUT", "GSP RPC Timeout", "RESET_GPU", "INVESTIGATE_SW", _D),
    120: XidInfo("GSP_ERROR", "GSP Error", "RESET_GPU", "INVESTIGATE_SW", _D),
    121: XidInfo("C2C_ERROR", "C2C Error (corrected errors on the C2C NVLink to a Grace CPU)", "IGNORE", "CONTACT_SUPPORT", _N),
    136: XidInfo("ALI_TRAINING_FAIL", "Link Training Failed", "RESET_GPU", "INVESTIGATE_LINK_SI", _N),
    137: XidInfo("NVLINK_PRIV_ERR", "NVLink Privilege Error", "IGNORE", "XID_137_FLOW", _A),
    140: XidInfo("UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC Unrecovered Error", "RESET_GPU", "CONTACT_SUPPORT", _M),
    143: XidInfo("GPU_INIT_ERROR", "GPU Initialization Error", "RESET_GPU", "CONTACT_SUPPORT", _H),
    144: XidInfo("NVLINK_SAW_ERROR", "NVLINK: SAW Error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", _N),
    145: XidInfo("NVLINK_RLW_ERROR", "NVLINK: RLW Error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", _N),
    146: XidInfo("NVLINK_TLW_ERROR", "NVLINK: TLW Error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", _N),
    147: XidInfo("NVLINK_TREX_ERROR", "NVLINK: TREX Error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", _N),
    148: XidInfo("NVLINK_NVLPW_CTRL_ERROR", "NVLINK: NVLPW_CTRL Error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", _N),
    149: XidInfo("NVLINK_NETIR_ERROR", "NVLINK: NETIR Error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", _N),
    150: XidInfo("NVLINK_MSE_ERROR", "NVLINK: MSE Error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", _N),
    151: XidInfo("ROBUST_CHANNEL_KEY_ROTATION_ERROR", "Key rotation Error", "RESTART_VM", "CONTACT_SUPPORT", _D),
    154: XidInfo("GPU_RECOVERY_ACTION_CHANGED", "GPU Recovery Action Changed", "XID_154", "N/A (informational, about another Xid)", _I),
    155: XidInfo("NVLINK_SW_DEFINED_ERROR", "NVLINK: SW Defined Error", "RESET_GPU", "INVESTIGATE_SW_USER", _N),
    156: XidInfo("RESOURCE_RETIREMENT_EVENT", "Resource Retirement Event", "RESET_GPU", "IGNORE", _M),
    157: XidInfo("RESOURCE_RETIREMENT_FAILURE", "Resource Retirement Failure", "IGNORE", "CONTACT_SUPPORT", _M),
    158: XidInfo("GPU_FATAL_TIMEOUT", "GPU Fatal Timeout", "RESET_GPU", "CONTACT_SUPPORT", _H),
}
# fmt: on

# What one Xid means for the node's health, by NVIDIA's immediate action.
ACTION_STATUS: dict[str, CheckStatus] = {
    "IGNORE": CheckStatus.OK,
    "WORKFLOW_XID_45": CheckStatus.OK,  # sympathetic: the Xid before it is the one that counts
    "RESTART_APP": CheckStatus.WARN,  # the job died; the GPU is usable
    "CONTACT_SUPPORT": CheckStatus.WARN,
    "RESTART_VM": CheckStatus.WARN,
    "RESET_GPU": CheckStatus.FAIL,
    "RESTART_BM": CheckStatus.FAIL,
    "WORKFLOW_XID_48": CheckStatus.FAIL,
    "WORKFLOW_NVLINK_ERR": CheckStatus.FAIL,
    "WORKFLOW_NVLINK5_ERR": CheckStatus.FAIL,
    "CHECK_MECHANICALS": CheckStatus.FAIL,
}
UNKNOWN_XID_STATUS = CheckStatus.WARN

# Xid 154 carries the action itself: "... changed from 0x0 (None) to 0x2 (Node Reboot Required)".
RECOVERY_ACTION_STATUS: dict[str, CheckStatus] = {
    "none": CheckStatus.OK,
    "drain p2p": CheckStatus.WARN,
    "drain and reset": CheckStatus.FAIL,
    "gpu reset required": CheckStatus.FAIL,
    "node reboot required": CheckStatus.FAIL,
}


class XidEvent(BaseModel):
    """One `NVRM: Xid (...)` kernel-log line."""

    xid: int
    pci_bus: str | None = Field(default=None, description="e.g. 0000:3b:00")
    pid: int | None = None
    process: str | None = None
    message: str = ""
    timestamp: datetime | None = Field(default=None, description="wall clock, UTC when known")
    uptime_s: float | None = Field(default=None, description="seconds since boot (raw dmesg)")
    line_no: int = Field(ge=1)
    raw: str
    key: str = Field(description="stable hash of the raw line: the watermark's identity")

    @property
    def info(self) -> XidInfo | None:
        return XID_CATALOG.get(self.xid)

    @property
    def status(self) -> CheckStatus:
        if self.xid == 154:
            action = recovery_action(self.message)
            return RECOVERY_ACTION_STATUS.get((action or "").lower(), CheckStatus.WARN)
        info = self.info
        if info is None:
            return UNKNOWN_XID_STATUS
        return ACTION_STATUS.get(info.immediate, CheckStatus.WARN)


class XidScan(BaseModel):
    """Every Xid found in a piece of kernel log, plus lines that looked like Xids but were cut."""

    events: list[XidEvent] = Field(default_factory=list)
    malformed: list[str] = Field(default_factory=list, description="truncated Xid lines, as read")


_XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\)?\s*:?\s*(?P<xid>\d+)\s*(?:,\s*(?P<rest>.*))?$"
)
_PID_RE = re.compile(r"pid=(?P<pid>'?<?\w+>?'?)")
_NAME_RE = re.compile(r"name=(?P<name>[^,]*)")
_RECOVERY_RE = re.compile(r"to 0x[0-9A-Fa-f]+ \((?P<action>[^)]+)\)")
_MONTHS = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"

# Line prefixes, most specific first. Each yields a wall-clock time, an uptime, or nothing.
_ISO_RE = re.compile(r"^(?P<ts>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\s")
_SYSLOG_RE = re.compile(rf"^(?P<ts>(?:{_MONTHS}) [ \d]\d \d{{2}}:\d{{2}}:\d{{2}})\s")
_CTIME_RE = re.compile(rf"\[(?P<ts>\w{{3}} (?:{_MONTHS}) [ \d]\d \d{{2}}:\d{{2}}:\d{{2}} \d{{4}})\]")
_UPTIME_RE = re.compile(r"\[\s*(?P<up>\d+\.\d+)\]")


def recovery_action(message: str) -> str | None:
    """The action an Xid 154 line names, e.g. 'Node Reboot Required'."""
    match = _RECOVERY_RE.search(message)
    return match.group("action").strip() if match else None


def line_key(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8", "surrogateescape")).hexdigest()[:20]


def _parse_iso(text: str) -> datetime | None:
    text = text.replace(",", ".").replace(" ", "T", 1)
    if len(text) > 5 and text[-5] in "+-" and text[-3] != ":":  # +0000 -> +00:00
        text = f"{text[:-2]}:{text[-2:]}"
    try:
        ts = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (ts if ts.tzinfo else ts.astimezone()).astimezone(UTC)


def _parse_syslog(text: str, now: datetime) -> datetime | None:
    # `Dec 02 15:04:05` has no year: take this year, or last year if that lands in the future.
    try:
        naive = datetime.strptime(f"{now.year} {text}", "%Y %b %d %H:%M:%S")
    except ValueError:
        return None
    ts = naive.astimezone().astimezone(UTC)
    if ts - now > timedelta(days=1):
        ts = naive.replace(year=now.year - 1).astimezone().astimezone(UTC)
    return ts


def _parse_ctime(text: str) -> datetime | None:
    try:
        return datetime.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y").astimezone().astimezone(UTC)
    except ValueError:
        return None


def _line_time(prefix: str, now: datetime) -> tuple[datetime | None, float | None]:
    if m := _ISO_RE.match(prefix):
        return _parse_iso(m.group("ts")), None
    wall = None
    if m := _SYSLOG_RE.match(prefix):
        wall = _parse_syslog(m.group("ts"), now)
    if wall is None and (m := _CTIME_RE.search(prefix)):
        wall = _parse_ctime(m.group("ts"))
    uptime = float(m.group("up")) if (m := _UPTIME_RE.search(prefix)) else None
    return wall, uptime


def parse_kernel_log(text: str | bytes, *, now: datetime | None = None) -> XidScan:
    """Find Xid lines in dmesg, `dmesg -T`, journalctl (short / short-iso) or ISO-stamped output.

    Never raises on content: non-UTF-8 bytes are replaced, other lines are skipped, and Xid lines
    that were cut off are returned in `malformed` rather than guessed at.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    now = now or datetime.now(UTC)
    scan = XidScan()
    for line_no, raw_line in enumerate(text.splitlines(), start=1):
        at = raw_line.find("NVRM: Xid")
        if at < 0:
            continue
        raw = raw_line.rstrip()
        body = raw[at:]
        match = _XID_RE.match(body)
        if match is None:
            scan.malformed.append(raw[:500])
            continue
        rest = (match.group("rest") or "").strip()
        pid_m = _PID_RE.search(rest)
        name_m = _NAME_RE.search(rest)
        pid_text = pid_m.group("pid").strip("'<>") if pid_m else ""
        wall, uptime = _line_time(raw[:at], now)
        scan.events.append(
            XidEvent(
                xid=int(match.group("xid")),
                pci_bus=match.group("pci").rstrip(":") or None,
                pid=int(pid_text) if pid_text.isdigit() else None,
                process=_known(name_m.group("name")) if name_m else None,
                message=_message(rest),
                timestamp=wall,
                uptime_s=uptime,
                line_no=line_no,
                raw=raw[:2000],
                key=line_key(raw),
            )
        )
    return scan


def _known(value: str) -> str | None:
    value = value.strip().strip("'")
    return None if not value or value == "<unknown>" else value


def _message(rest: str) -> str:
    """The human part of an Xid line, without the pid=/name=/channel= bookkeeping."""
    parts = [p.strip() for p in rest.split(",")]
    keep = [p for p in parts if not re.match(r"^(pid|name|channel)=", p)]
    return ", ".join(keep)[:500]
