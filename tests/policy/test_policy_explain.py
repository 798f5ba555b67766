"""`pitstop policy explain`: the decision for given evidence, through the same classifier and the
same pure `decide` the flows use, touching nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pitstop.config import Mode
from pitstop.node.xid import XID_CATALOG
from pitstop.policy import load_policy
from pitstop.policy.safety import ModeState
from pitstop.cli.policy_explain import ExplainRequest, explain
from tests.policy.test_xid_buckets import EXPECTED_NODE_STEPS, RULE_EXCEPTIONS

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "suspects"
POLICY = load_policy()
ACT = ModeState(mode=Mode.ACT)


def pitstop(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pitstop.cli.entry", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("xid", sorted(XID_CATALOG), ids=lambda x: f"xid-{x}")
def test_every_catalog_xid_explains_as_its_bucket_default(xid: int) -> None:
    """The whole catalog, through the classifier: `--xid N --node gpu01` gives the bucket's plan."""
    view = explain(ExplainRequest(xid=xid, node="gpu01"), POLICY, ACT)
    assert view.signature == f"xid-{xid}"
    node_steps = [a.kind for a in view.actions if a.target == "gpu01"]
    expected = RULE_EXCEPTIONS.get(xid) or EXPECTED_NODE_STEPS[XID_CATALOG[xid].immediate]
    assert node_steps == [k.value for k in expected], view.explain
    if xid not in RULE_EXCEPTIONS:
        assert view.bucket == XID_CATALOG[xid].immediate


def test_cli_json_contract_and_nothing_changes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    proc = subprocess.run([sys.executable, "-m", "pitstop.cli.entry", "policy", "explain", "--xid", "95",
                           "--node", "gpu01", "--mode", "act", "--json"], capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "PITSTOP_HOME": str(home)})
    assert proc.returncode == 0, proc.stderr
    view = json.loads(proc.stdout)
    assert {"cause", "signature", "suspects", "actions"} <= set(view)
    assert view["bucket"] == "RESET_GPU"
    assert [(a["kind"], a["target"]) for a in view["actions"]][:3] == [
        ("drain", "gpu01"), ("gpu_reset", "gpu01"), ("diag", "gpu01")]
    assert all(a["why"] for a in view["actions"])
    assert not (home / "pitstop.db").exists()  # explain reads no store and writes none


def test_fabric_fault_names_the_node_among_several() -> None:
    req = ExplainRequest(logs=[FIX / "fabric_gpu01.log"], nodes=["gpu01", "gpu02"],
                         kernel_logs={"gpu01": FIX / "kernel_gpu01_linkdown.txt", "gpu02": FIX / "kernel_gpu02_clean.txt"})
    view = explain(req, POLICY, ACT)
    assert view.cause == "network_fabric"
    assert [(s.node, s.hardware) for s in view.suspects] == [("gpu01", True)]
    assert [a.target for a in view.actions if a.kind == "drain"] == ["gpu01"]
    requeue = next(a for a in view.actions if a.kind == "requeue")
    assert "excluding gpu01" in requeue.describe and "named by the evidence" in requeue.why
    # The same NCCL line without gpu01's kernel log: excluded from the requeue, but not drained.
    view = explain(ExplainRequest(logs=[FIX / "fabric_gpu01.log"], nodes=["gpu01", "gpu02"]), POLICY, ACT)
    assert [(s.node, s.hardware) for s in view.suspects] == [("gpu01", False)]
    assert not any(a.kind == "drain" for a in view.actions)
    assert "excluding gpu01" in next(a for a in view.actions if a.kind == "requeue").describe


def test_flight_recorder_names_the_lagging_rank_s_node() -> None:
    req = ExplainRequest(logs=[FIX / "rank5_lag.log"], nodes=["gpu01", "gpu02"], tasks_per_node="4(x2)",
                         flight_recorder=[FIX / "fr_rank5_lags"])
    view = explain(req, POLICY, ACT)
    assert view.cause == "nccl_timeout"
    assert [s.node for s in view.suspects] == ["gpu02"] and "rank 5" in view.suspects[0].reasons[0]
    assert "excluding gpu02" in next(a for a in view.actions if a.kind == "requeue").describe


def test_observe_mode_plans_but_would_not_do() -> None:
    view = explain(ExplainRequest(xid=79, node="gpu01"), POLICY, ModeState(mode=Mode.OBSERVE))
    assert {a.disposition for a in view.actions if a.target == "gpu01"} == {"would_do"}


@pytest.mark.parametrize("args, message", [
    ([], "give some evidence"),
    (["--log", "/nonexistent/slurm-1.out"], "not a readable file"),
    (["--kernel-log", "dmesg.txt"], "NODE=PATH"),
    (["--xid", "79", "--node", "gpu01 --all"], "not a valid node name"),
])
def test_bad_input_is_a_clear_usage_error(args: list[str], message: str) -> None:
    proc = pitstop("policy", "explain", *args)
    assert proc.returncode == 2 and message in proc.stderr, (proc.returncode, proc.stderr)
