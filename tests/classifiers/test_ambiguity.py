"""Honest ambiguity: alternatives with what tells them apart, and node evidence that settles them."""

from __future__ import annotations

import pytest

from classifiers import classify_text
from classifiers.ambiguity import AMBIGUOUS, CONFIRMED_FLOOR, NodeFinding, NodeTest, settle
from classifiers.rules import RULES
from pitstop.models import Cause

LAUNCH_FAILURE = "step 120 loss 2.31\nRuntimeError: CUDA error: unspecified launch failure\n"
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus."
WATCHDOG = ("[rank3]:[E ProcessGroupNCCL.cpp:563] [Rank 3] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=88211, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600012 milliseconds "
            "before timing out.\n")


def _read(node: str, **kw) -> NodeFinding:
    return NodeFinding(node=node, kernel_read=True, checks_run=["nvml", "ib"], **kw)


def test_every_row_names_a_real_signature_and_a_different_cause():
    known = {r.signature for r in RULES}
    for row in AMBIGUOUS:
        assert row.signatures <= known, row.signatures - known
        assert row.alternative not in row.causes


def test_a_crashed_kernel_is_software_bug_with_gpu_as_a_named_alternative():
    v = classify_text(LAUNCH_FAILURE)
    assert (v.cause, v.signature) == (Cause.SOFTWARE_BUG, "cuda-unspecified-launch-failure")
    assert v.confidence < 0.7  # not "full confidence" for a line that does not decide
    [alt, *_] = v.alternatives
    assert alt.cause is Cause.GPU_HARDWARE and alt.settled_by == NodeTest.GPU_XID
    assert "Xid" in alt.tells_apart and "no Xid" in alt.tells_apart
    assert v.decided_by == ""  # nothing has been looked at yet


@pytest.mark.parametrize("line", ["include/alloc.h:123 NCCL WARN Cuda failure 'unknown error'",
                                  "Cuda failure 999 'unknown error'", "RuntimeError: CUDA error: unknown error"])
def test_cuda_unknown_error_says_gpu_or_code(line):
    v = classify_text(line + "\n")
    assert v.cause is Cause.SOFTWARE_BUG and v.signature == "cuda-error-unknown" and v.confidence <= 0.6
    assert v.alternatives[0].cause is Cause.GPU_HARDWARE


def test_an_xid_in_the_kernel_log_decides_and_says_so():
    v = classify_text(LAUNCH_FAILURE, kernel_text=XID79 + "\n")
    assert v.cause is Cause.GPU_HARDWARE and v.signature == "xid-79"
    assert "driver's own record" in v.decided_by and "cuda-unspecified-launch-failure" in v.decided_by
    assert Cause.SOFTWARE_BUG in [a.cause for a in v.alternatives]


def test_node_evidence_switches_the_cause_and_leads_the_evidence():
    v = settle(classify_text(LAUNCH_FAILURE), [_read("gpu01"), _read("gpu02", gpu_xids=[XID79])])
    assert v.cause is Cause.GPU_HARDWARE and v.signature == "cuda-unspecified-launch-failure+gpu_xid"
    assert v.evidence[0].source == "node gpu02" and "79" in v.evidence[0].text
    assert "gpu02" in v.decided_by
    assert v.alternatives[0].cause is Cause.SOFTWARE_BUG  # the log's reading stays visible


def test_a_failing_gpu_check_switches_it_too():
    v = settle(classify_text(LAUNCH_FAILURE),
               [_read("gpu01", failing_checks={"nvml": "GPU 3: 12 retired pages pending"})])
    assert v.cause is Cause.GPU_HARDWARE and "retired pages" in v.decided_by


def test_clean_nodes_confirm_the_log_and_say_what_was_checked():
    before = classify_text(LAUNCH_FAILURE)
    v = settle(before, [_read("gpu01"), _read("gpu02")])
    assert v.cause is Cause.SOFTWARE_BUG and v.confidence >= CONFIRMED_FLOOR > before.confidence
    assert "no hardware Xid" in v.decided_by and "gpu01, gpu02" in v.decided_by and "stands" in v.decided_by


def test_an_unread_node_leaves_it_open_and_names_the_node():
    before = classify_text(LAUNCH_FAILURE)
    v = settle(before, [_read("gpu01"),
                        NodeFinding(node="gpu02", kernel_read=False, why_unread="kernel log: gpu02: timed out")])
    assert v.cause is Cause.SOFTWARE_BUG and v.confidence == before.confidence
    assert "undecided" in v.decided_by and "gpu02" in v.decided_by and "timed out" in v.decided_by


def test_nccl_timeout_with_a_failing_ib_port_is_the_fabric():
    v = settle(classify_text(WATCHDOG), [_read("gpu01"), _read("gpu03", failing_checks={"ib": "mlx5_0 port 1 Down"})])
    assert v.cause is Cause.NETWORK_FABRIC and "gpu03" in v.decided_by


def test_a_partial_check_is_reported_without_raising_confidence():
    before = classify_text(WATCHDOG)
    no_ib = NodeFinding(node="gpu01", kernel_read=True, checks_run=["nvml"])
    v = settle(before, [no_ib])
    assert v.cause is Cause.NCCL_TIMEOUT and v.confidence == before.confidence
    assert "no hardware Xid" in v.decided_by and "not checked: failing InfiniBand check on gpu01" in v.decided_by


def test_unambiguous_verdicts_are_left_alone():
    v = classify_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert v.cause is Cause.CUDA_OOM
    assert settle(v, [_read("gpu01", gpu_xids=[XID79])]) == v
