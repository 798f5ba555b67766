"""Runs the local checks of one node and combines them into a `NodeCheckReport`.

The checks are the rows of `CHECKS` (pitstop/node/registry.py): adding one is one module with a
`check(ctx)` function plus one row there. A check's module is imported only when it runs. A
check that raises is reported as a WARN naming the bug (so the node is not drained over a
Pitstop defect, and the defect is not hidden either).
"""

from __future__ import annotations

import importlib
import os
import socket
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pitstop.config import Settings
from pitstop.models import CheckResult, CheckStatus, NodeCheckReport
from pitstop.node.registry import CHECKS, CheckSpec
from pitstop.node.status import worst
from pitstop.node.tool import Runner, run_tool

__all__ = ["CHECKS", "CheckContext", "CheckSpec", "UnknownCheck", "parse_check_names", "run_checks"]


class CheckContext:
    """What a check may need; tests replace `nvml`, `kernel_log_reader` or `runner` (the function
    that runs a node tool such as ipmitool) with fakes for hardware that is absent."""

    def __init__(self, settings: Settings, *, dcgm_level: int | None = None, nvml: Any | None = None,
                 kernel_log_reader: Callable | None = None, commit_watermark: bool = True,
                 runner: Runner | None = None, node: str | None = None) -> None:
        self.settings = settings
        self.dcgm_level = dcgm_level or settings.node_check.dcgm_level
        self.nvml = nvml
        self.kernel_log_reader = kernel_log_reader
        self.commit_watermark = commit_watermark
        self.runner: Runner = runner or run_tool
        self.node = node or node_name()


# Adapters for the checks written before the registry took a CheckContext; new checks define
# `check(ctx)` in their own module instead.
def nvml_check(ctx: CheckContext) -> CheckResult:
    from pitstop.node.nvml import check_nvml

    return check_nvml(ctx.settings.node_check, ctx.nvml)


def xid_check(ctx: CheckContext) -> CheckResult:
    from pitstop.node.kernel_log import check_xid, read_kernel_log

    return check_xid(ctx.settings.node_check, ctx.settings.home,
                     reader=ctx.kernel_log_reader or read_kernel_log, commit=ctx.commit_watermark)


def ib_check(ctx: CheckContext) -> CheckResult:
    from pitstop.node.infiniband import check_ib

    return check_ib(ctx.settings.node_check)


def disk_check(ctx: CheckContext) -> CheckResult:
    from pitstop.node.disk import check_disk

    return check_disk(ctx.settings.node_check, ctx.settings.home)


def dcgm_check(ctx: CheckContext) -> CheckResult:
    from pitstop.node.dcgm import check_dcgm

    nc = ctx.settings.node_check
    return check_dcgm(ctx.dcgm_level, dcgmi=nc.dcgmi_path, timeout_s=nc.dcgm_timeout_s)


def load(spec: CheckSpec) -> Callable[[CheckContext], CheckResult]:
    """The check function a registry row names, imported now (not at start-up)."""
    module_name, _, func_name = spec.target.partition(":")
    return getattr(importlib.import_module(module_name), func_name)


class UnknownCheck(ValueError):
    """A check name that does not exist; the message lists the valid ones."""


def parse_check_names(text: str | None, default: list[str]) -> list[str]:
    names = [n.strip().lower() for n in (text.split(",") if text else default) if n.strip()]
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise UnknownCheck(f"unknown check(s) {', '.join(unknown)}; choose from {', '.join(CHECKS)}")
    return list(dict.fromkeys(names))


def node_name() -> str:
    # In a Slurm prolog/health check the logical node name can differ from the host name.
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0] or "localhost"


def run_checks(names: list[str], ctx: CheckContext) -> NodeCheckReport:
    results: list[CheckResult] = []
    for name in names:
        try:
            results.append(load(CHECKS[name])(ctx))
        except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
            results.append(CheckResult(
                name=name, status=CheckStatus.WARN,
                summary=f"the {name} check itself failed ({exc.__class__.__name__}: {exc}); please report this",
            ))
    return NodeCheckReport(
        node=ctx.node,
        checked_at=datetime.now(UTC).isoformat(timespec="seconds"),
        overall=worst(r.status for r in results),
        checks=results,
    )
