"""PCIe link width and speed of every NVIDIA GPU and NIC, against what the link could train at.

Read from sysfs (`/sys/bus/pci/devices/<addr>/`, kernel Documentation/ABI/testing/sysfs-bus-pci;
drivers/pci/pci-sysfs.c prints `current_link_width` / `max_link_width` as a number of lanes and
`current_link_speed` / `max_link_speed` as e.g. `16.0 GT/s PCIe`, `8 GT/s` on older kernels, or
`Unknown`). A link can only train as wide and as fast as both ends allow, so the expected link is
the smaller of the device's maximum and its upstream port's (the parent directory in
/sys/devices); a Gen5 NIC in a Gen4 slot is not degraded, an x16 GPU at x8 is.

`read_links` is the reader (sysfs root injectable), `evaluate` the pure verdict.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from pitstop.config import NodeCheckSettings
from pitstop.models import CheckResult, CheckStatus
from pitstop.node.status import worst

NVIDIA = "0x10de"
MELLANOX = "0x15b3"
_SPEED = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*GT/s")
# GT/s -> PCIe generation (PCI-SIG: Gen1 2.5, Gen2 5, Gen3 8, Gen4 16, Gen5 32, Gen6 64 GT/s)
GENERATION = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


class PcieLink(BaseModel):
    address: str = Field(description="PCI address, e.g. 0000:3b:00.0")
    kind: Literal["gpu", "nic"]
    vendor: str
    device: str | None = None
    width: int | None = Field(default=None, description="lanes now (current_link_width)")
    max_width: int | None = Field(default=None, description="lanes the device supports (max_link_width)")
    speed_gts: float | None = None
    max_speed_gts: float | None = None
    upstream_max_width: int | None = Field(default=None, description="the upstream port's max_link_width")
    upstream_max_speed_gts: float | None = None

    @property
    def expected_width(self) -> int | None:
        return _smaller(self.max_width, self.upstream_max_width)

    @property
    def expected_speed_gts(self) -> float | None:
        return _smaller(self.max_speed_gts, self.upstream_max_speed_gts)

    @property
    def label(self) -> str:
        return f"{'GPU' if self.kind == 'gpu' else 'NIC'} {self.address}"


def _smaller(a, b):
    return min(x for x in (a, b) if x is not None) if (a is not None or b is not None) else None


def parse_speed(text: str | None) -> float | None:
    """`16.0 GT/s PCIe` -> 16.0; `Unknown` / empty / garbage -> None."""
    m = _SPEED.match(text or "")
    return float(m.group(1)) if m else None


def parse_width(text: str | None) -> int | None:
    text = (text or "").strip()
    return int(text) if text.isdigit() and len(text) <= 3 else None


def device_kind(vendor: str, pci_class: str) -> Literal["gpu", "nic"] | None:
    """NVIDIA display/3D controllers (class 0x03xxxx) are GPUs; network controllers (0x02xxxx:
    Ethernet 0x0200, InfiniBand 0x0207, e.g. Mellanox/NVIDIA ConnectX) are NICs. An NVIDIA NVSwitch
    (0x0680) or a GPU's audio function (0x0403) is neither."""
    vendor, pci_class = vendor.strip().lower(), pci_class.strip().lower()
    if vendor == NVIDIA and pci_class.startswith("0x03"):
        return "gpu"
    if pci_class.startswith("0x02"):
        return "nic"
    return None


def _read(path: Path, limit: int = 64) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read(limit).strip()
    except OSError:  # missing attribute (no PCIe capability), EINVAL from a dead link, EACCES
        return None


def read_links(root: Path) -> list[PcieLink]:
    """Every GPU and NIC under `root` (normally /sys/bus/pci/devices) with its link attributes.
    Virtual functions (`physfn` present) share their parent's link and are left out."""
    links: list[PcieLink] = []
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return links
    for entry in entries:
        vendor, pci_class = _read(entry / "vendor"), _read(entry / "class")
        kind = device_kind(vendor or "", pci_class or "")
        if kind is None or (entry / "physfn").exists():
            continue
        upstream = entry.resolve().parent
        links.append(PcieLink(
            address=entry.name, kind=kind, vendor=vendor or "", device=_read(entry / "device"),
            width=parse_width(_read(entry / "current_link_width")),
            max_width=parse_width(_read(entry / "max_link_width")),
            speed_gts=parse_speed(_read(entry / "current_link_speed")),
            max_speed_gts=parse_speed(_read(entry / "max_link_speed")),
            upstream_max_width=parse_width(_read(upstream / "max_link_width")),
            upstream_max_speed_gts=parse_speed(_read(upstream / "max_link_speed")),
        ))
    return links


def _gen(gts: float | None) -> str:
    return f"Gen{GENERATION[gts]}" if gts in GENERATION else (f"{gts:g} GT/s" if gts else "?")


def link_findings(link: PcieLink, judge_gpu_speed: bool) -> list[tuple[CheckStatus, str]]:
    """What is wrong with one link, most severe first. Pure."""
    found: list[tuple[CheckStatus, str]] = []
    if link.width == 0:
        found.append((CheckStatus.FAIL, f"{link.label}: PCIe link is down (0 lanes of x{link.expected_width or '?'}): "
                                        "drain, reseat or replace the card"))
        return found
    want_w, want_s = link.expected_width, link.expected_speed_gts
    if link.width is not None and want_w is not None and link.width < want_w:
        found.append((CheckStatus.WARN, f"{link.label}: PCIe link x{link.width} of x{want_w} "
                                        f"({link.width * 100 // want_w}% of its bandwidth): reseat the card, check the riser/slot"))
    # GPUs lower their link speed when idle to save power (nvidia-smi -q shows "Link Gen Current"
    # below "Max" at idle), so a slow GPU link is only judged when asked to.
    slow = link.speed_gts is not None and want_s is not None and link.speed_gts < want_s
    if slow and (link.kind == "nic" or judge_gpu_speed):
        found.append((CheckStatus.WARN, f"{link.label}: PCIe link at {_gen(link.speed_gts)} of {_gen(want_s)}: "
                                        "check the slot, riser and BIOS link settings"))
    return found


def evaluate(links: list[PcieLink], settings: NodeCheckSettings) -> CheckResult:
    readable = [lk for lk in links if lk.width is not None or lk.speed_gts is not None]
    details = {"links": [lk.model_dump() | {"expected_width": lk.expected_width,
                                            "expected_speed_gts": lk.expected_speed_gts} for lk in links]}
    if not readable:
        what = f"{len(links)} GPU/NIC(s) without PCIe link attributes (virtual or legacy PCI)" if links else "no NVIDIA GPU or NIC"
        return CheckResult(name="pcie", status=CheckStatus.UNAVAILABLE, summary=f"pcie: {what} here", details=details)
    found = [f for lk in readable for f in link_findings(lk, settings.pcie_judge_gpu_speed)]
    details["findings"] = [{"status": s.value, "message": m} for s, m in found]
    status = worst(s for s, _ in found)
    if status is CheckStatus.OK:
        gpus = sum(1 for lk in readable if lk.kind == "gpu")
        return CheckResult(name="pcie", status=status, details=details,
                           summary=f"{gpus} GPU and {len(readable) - gpus} NIC link(s) at full width")
    first = next(m for s, m in found if s is status)
    more = len(found) - 1
    return CheckResult(name="pcie", status=status, details=details,
                       summary=first + (f" (+{more} more finding(s))" if more else ""))


def check_pcie(settings: NodeCheckSettings, root: Path | None = None) -> CheckResult:
    return evaluate(read_links(root or settings.pcie_sysfs_root), settings)


def check(ctx) -> CheckResult:
    """The registry's entry point (pitstop/node/registry.py); `ctx` is a node.check.CheckContext."""
    return check_pcie(ctx.settings.node_check)
