"""tasks.classify.node_finding: a node's gathered evidence as the ambiguity check reads it."""

from __future__ import annotations

from pitstop.models import CheckResult, CheckStatus, NodeCheckReport
from tasks.classify import node_finding
from tasks.evidence import NodeEvidence

KERNEL = (
    "[ 8123.4] NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python, Graphics Exception: ESR 0x405840=0x1\n"
    "[ 8124.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus.\n"
)


def _report(*checks: CheckResult) -> NodeCheckReport:
    return NodeCheckReport(node="gpu02", checked_at="2026-12-03T10:00:00+00:00", overall="FAIL", checks=list(checks))


def test_only_hardware_xids_and_real_check_verdicts_count(tmp_path):
    log = tmp_path / "kernel-gpu02.log"
    log.write_text(KERNEL)
    evidence = NodeEvidence(node="gpu02", kernel_log=str(log), kernel_lines=2, check=_report(
        CheckResult(name="nvml", status=CheckStatus.FAIL, summary="GPU 3: not reachable"),
        CheckResult(name="ib", status=CheckStatus.UNAVAILABLE, summary="no InfiniBand devices"),
        CheckResult(name="disk", status=CheckStatus.OK, summary="/: 80% free")))
    f = node_finding(evidence)
    assert f.kernel_read and [x for x in f.gpu_xids] == [KERNEL.splitlines()[1]]  # Xid 13 is the app's
    assert f.checks_run == ["nvml", "disk"] and f.failing_checks == {"nvml": "GPU 3: not reachable"}


def test_an_unreachable_node_is_unread_with_the_reason():
    evidence = NodeEvidence(node="gpu04", problems=["kernel log: gpu04: connection timed out", "node check: no output"])
    f = node_finding(evidence)
    assert not f.kernel_read and f.why_unread == "kernel log: gpu04: connection timed out" and f.checks_run == []


def test_a_vanished_kernel_copy_is_unread_not_a_crash(tmp_path):
    f = node_finding(NodeEvidence(node="gpu05", kernel_log=str(tmp_path / "gone.log"), kernel_lines=3))
    assert not f.kernel_read and "unreadable" in f.why_unread
