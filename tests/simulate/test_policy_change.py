"""The simulation runs the real decision path: change the policy file, and the ETTR changes."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml

from pitstop.policy.model import load_policy
from pitstop.simulate import compare
from pitstop.simulate.strategies import strategies
from tests.conftest import REPO_ROOT
from tests.simulate.conftest import SEEDS

LONG_RUN = REPO_ROOT / "docs" / "simulate" / "long_run_policy.yaml"
# NVIDIA buckets of the GPU Xids in the Llama 3 mix (79, 119, 62) besides the gpu_hardware rules
GPU_BUCKETS = ("RESTART_BM", "RESET_GPU")


def _no_gpu_exclusion(tmp_path: Path) -> Path:
    """The default policy, except that GPU faults are requeued on the same nodes, nothing drained."""
    data = yaml.safe_load(resources.files("pitstop.policy").joinpath("default_policy.yaml").read_text())
    plan = [{"requeue": {"exclude_faulty_nodes": False}}, "notify_user"]
    for rule in data["rules"]:
        if rule["cause"] == "gpu_hardware":
            rule["actions"] = plan
    for bucket in GPU_BUCKETS:
        data["xid_buckets"][bucket]["actions"] = plan
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_policy_that_never_drains_gpus_costs_ettr(tmp_path: Path, params, classify, default_runs) -> None:
    policy = load_policy(_no_gpu_exclusion(tmp_path))
    worse = compare(params, policy, classify, seed=0, strategies=strategies(["act"])).by_name("act")
    act = default_runs[0].by_name("act")
    assert worse.ettr < act.ettr - 0.02, (worse.ettr, act.ettr)
    assert worse.repeats_by_category.get("faulty_gpu", 0) > 2 * act.repeats_by_category.get("faulty_gpu", 0)


def test_the_long_run_policy_reaches_the_papers_ettr(params, classify, default_runs) -> None:
    """docs/simulate/long_run_policy.yaml lifts the retry limit for node-excluding requeues and
    requeues a software bug once however early it came: fewer restarts by hand than the default
    (which requeues only a crash after an hour of running), and above Llama 3's 0.90."""
    policy = load_policy(LONG_RUN)
    runs = {s: compare(params, policy, classify, seed=s, strategies=strategies(["act"])).by_name("act") for s in SEEDS}
    for seed, run in runs.items():
        default = default_runs[seed].by_name("act")
        assert run.ettr > default.ettr and run.human_restarts < default.human_restarts, seed
    assert sum(r.ettr for r in runs.values()) / len(runs) > 0.90
