"""The node checks `pitstop node-check` knows: one row each, nothing else to register.

A row names the check, where its `check(ctx) -> CheckResult` lives ("module:function", imported
only when the check runs, so node-check start-up stays lean), one line of help, and whether it
belongs to the default set. The CLI help, `node_check.checks` and `triggers.prolog_checks`
defaults are all derived from this table.

Default sets:
- `default`: what `pitstop node-check` (and so the health sweep, over SSH) runs when no checks are
  named. Only checks that answer in well under a second and report UNAVAILABLE when their tool
  or file is missing (UNAVAILABLE never fails a node).
- `prolog`: also run before every job (triggers.prolog_timeout_s, 5 s): reads of /proc, sysfs
  and local state only, no tool that talks to a BMC, a drive or slurmctld.

This module is pure data (stdlib only) so `pitstop.config` can take its defaults from it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CheckSpec:
    name: str
    target: str  # "package.module:function", the function takes a CheckContext
    help: str
    default: bool = False
    prolog: bool = False


_ROWS: tuple[CheckSpec, ...] = (
    CheckSpec("nvml", "pitstop.node.check:nvml_check",
              "GPUs via NVML: temperature, ECC, row remapping, NVLink, throttling", default=True, prolog=True),
    CheckSpec("xid", "pitstop.node.check:xid_check",
              "new NVIDIA Xid errors in the kernel log", default=True, prolog=True),
    CheckSpec("ib", "pitstop.node.check:ib_check",
              "InfiniBand ports: state, rate, error counters", default=True),
    CheckSpec("disk", "pitstop.node.check:disk_check",
              "free space and inodes of / and PITSTOP_HOME", default=True, prolog=True),
    CheckSpec("dcgm", "pitstop.node.check:dcgm_check",
              "dcgmi diag (minutes at level 3/4; opt-in, or --dcgm-level)"),
    # A bounded probe per mount; nothing to do (UNAVAILABLE) until node_check.required_mounts is set.
    CheckSpec("mounts", "pitstop.node.mounts:check",
              "required mounts present and answering within node_check.mount_timeout_s", default=True, prolog=True),
    CheckSpec("cpu_mem", "pitstop.node.cpu_mem:check",
              "machine checks, EDAC memory error counts, CPU frequency governor", default=True, prolog=True),
    CheckSpec("nvme", "pitstop.node.nvme:check",
              "NVMe SMART health: critical warning, media errors, wear", default=True),
    CheckSpec("services", "pitstop.node.services:check",
              "required systemd services active (slurmd, nvidia-persistenced, fabric manager)", default=True),
    CheckSpec("gres", "pitstop.node.gres:check",
              "GPUs visible to the driver match the node's Slurm GRES", default=True),
    CheckSpec("pcie", "pitstop.node.pcie:check",
              "PCIe link width and speed of every GPU and NIC against what card and slot allow", default=True),
    # Opt-in: a BMC over KCS can take tens of seconds to list its SEL and SDR.
    CheckSpec("ipmi", "pitstop.node.ipmi:check",
              "BMC: PSU, fan and temperature sensors now, and their SEL events of the last day"),
    # Burn-in, opt-in only: minutes of all_reduce_perf on every GPU (diag `checks: [nccl]`).
    CheckSpec("nccl", "pitstop.node.nccl_tests:check",
              "nccl-tests all_reduce_perf bus bandwidth vs burn_in.expected_busbw_gbps (minutes, all GPUs)"),
)

CHECKS: dict[str, CheckSpec] = {row.name: row for row in _ROWS}


def default_checks() -> list[str]:
    return [row.name for row in CHECKS.values() if row.default]


def prolog_checks() -> list[str]:
    return [row.name for row in CHECKS.values() if row.prolog]
