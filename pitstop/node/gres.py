"""The GPUs the driver sees match the GPUs Slurm schedules on this node (its GRES).

A GPU that fell off the bus (Xid 79) or was not enumerated after a reboot leaves Slurm handing
out 8 GPUs on a node that has 7: jobs start and then fail in CUDA or NCCL initialisation.

- Expected: `node_check.expected_gpus`, else `scontrol show node -o NODE`, whose one-line record
  holds `Gres=gpu:h100:8(S:0-1)` (scontrol(1); the GRES syntax is slurm.conf(5) "Gres":
  name[:type]:count, count with an optional K/M/G suffix, "(S:...)" the socket binding scontrol
  appends; "(null)" when the node has none).
- Visible: NVML's device count (nvmlDeviceGetCount), else `nvidia-smi -L`, one
  "GPU <n>: <name> (UUID: GPU-...)" line per GPU (MIG devices are indented lines below their GPU).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pitstop.config import NodeCheckSettings
from pitstop.models import CheckResult, CheckStatus
from pitstop.node.status import NodeParseError
from pitstop.node.tool import Runner, ToolTimedOut, ToolUnavailable

if TYPE_CHECKING:
    from pitstop.node.check import CheckContext

_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
_COUNT = re.compile(r"^(\d+)([KMG]?)$")


def parse_gres(gres: str, name: str = "gpu") -> int:
    """How many `name` GRES a Gres= value declares: 'gpu:h100:8(S:0-1),nic:2' -> 8."""
    gres = gres.strip()
    if gres in ("", "(null)"):
        return 0
    total = 0
    for entry in re.split(r",(?![^(]*\))", gres):  # commas inside "(S:0,1)" belong to the entry
        entry = re.sub(r"\(.*\)$", "", entry.strip())
        parts = [p for p in entry.split(":") if p and p != "no_consume"]
        if not parts:
            raise NodeParseError(f"GRES entry {entry!r} is empty")
        if parts[0] != name:
            continue
        match = _COUNT.match(parts[-1]) if len(parts) > 1 else None
        if len(parts) > 1 and match is None and len(parts) > 2:
            raise NodeParseError(f"GRES entry {entry!r} has no count")
        total += int(match.group(1)) * _SUFFIX[match.group(2)] if match else 1  # no count: one
    return total


def parse_scontrol_node(text: str) -> str:
    """The Gres= value of a `scontrol show node -o` record."""
    match = re.search(r"(?:^|\s)Gres=(\S*)", text)
    if match is None:
        raise NodeParseError(f"scontrol show node printed no Gres= field: {text.strip()[:100]!r}")
    return match.group(1)


def parse_nvidia_smi_list(text: str) -> int:
    """GPUs in `nvidia-smi -L` output."""
    return sum(1 for line in text.splitlines() if re.match(r"^GPU \d+:", line))


def process_gres(visible: int | None, expected: int | None, *, gres: str | None, visible_source: str,
                 unavailable: str = "") -> CheckResult:
    """The verdict on the two counts. Pure."""
    details = {"visible": visible, "visible_source": visible_source, "expected": expected, "gres": gres}
    declared = f"Slurm GRES {gres}" if gres is not None else "node_check.expected_gpus"
    if expected is None:
        return CheckResult(name="gres", status=CheckStatus.UNAVAILABLE, details=details,
                           summary=f"the node's GPU GRES is unknown: {unavailable}")
    if visible is None:
        if expected == 0:
            return CheckResult(name="gres", status=CheckStatus.OK, details=details,
                               summary=f"no GPUs expected ({declared}) and no NVIDIA driver here")
        return CheckResult(name="gres", status=CheckStatus.UNAVAILABLE, details=details,
                           summary=f"cannot count GPUs ({unavailable}); {declared} expects {expected}")
    if visible < expected:
        return CheckResult(name="gres", status=CheckStatus.FAIL, details=details,
                           summary=f"only {visible} of {expected} GPUs visible ({declared}): a GPU is missing "
                                   "(fell off the bus? see dmesg for Xid 79 and `nvidia-smi -L`)")
    if visible > expected:
        return CheckResult(name="gres", status=CheckStatus.WARN, details=details,
                           summary=f"{visible} GPUs visible but {declared} declares {expected}: "
                                   "Slurm leaves some idle; fix gres.conf/slurm.conf")
    return CheckResult(name="gres", status=CheckStatus.OK, details=details,
                       summary=f"{visible} GPU(s) visible, as {declared} declares")


def nvml_count(nvml: Any | None) -> int:
    """GPUs NVML enumerates. Raises ToolUnavailable without a driver or pynvml."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError as exc:
            raise ToolUnavailable("nvidia-ml-py (pynvml) is not installed") from exc
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise ToolUnavailable(f"NVML: {exc}") from exc
    try:
        return int(nvml.nvmlDeviceGetCount())
    except nvml.NVMLError as exc:
        raise ToolUnavailable(f"NVML device count: {exc}") from exc
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


def count_visible(nvml: Any | None, runner: Runner, settings: NodeCheckSettings) -> tuple[int, str]:
    try:
        return nvml_count(nvml), "nvml"
    except ToolUnavailable as nvml_why:
        try:
            out = runner([settings.nvidia_smi_path, "-L"], settings.tool_timeout_s)
        except (ToolUnavailable, ToolTimedOut) as exc:
            raise ToolUnavailable(f"{nvml_why}; {exc}") from exc
        if out.returncode != 0:
            raise ToolUnavailable(f"{nvml_why}; nvidia-smi -L: {out.error_text}") from None
        return parse_nvidia_smi_list(out.stdout), "nvidia-smi"


def read_expected(node: str, runner: Runner, settings: NodeCheckSettings) -> tuple[int, str]:
    """(GPU count, the Gres= text) from scontrol. Raises ToolUnavailable / ToolTimedOut / NodeParseError."""
    out = runner([settings.scontrol_path, "show", "node", "-o", node], settings.tool_timeout_s)
    if out.returncode != 0:  # "Node gpu99 not found": SLURMD_NODENAME differs from the host name?
        raise ToolUnavailable(f"scontrol show node {node}: {out.error_text}")
    gres = parse_scontrol_node(out.stdout)
    return parse_gres(gres), gres


def check(ctx: CheckContext) -> CheckResult:
    nc = ctx.settings.node_check
    gres: str | None = None
    if nc.expected_gpus is not None:
        expected = nc.expected_gpus
    else:
        try:
            expected, gres = read_expected(ctx.node, ctx.runner, nc)
        except (ToolUnavailable, ToolTimedOut) as exc:
            return process_gres(None, None, gres=None, visible_source="", unavailable=str(exc))
        except NodeParseError as exc:
            return CheckResult(name="gres", status=CheckStatus.WARN, summary=str(exc))
    try:
        visible, source = count_visible(ctx.nvml, ctx.runner, nc)
    except ToolUnavailable as exc:
        return process_gres(None, expected, gres=gres, visible_source="", unavailable=str(exc))
    return process_gres(visible, expected, gres=gres, visible_source=source)
