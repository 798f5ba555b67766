"""GPU count vs the node's Slurm GRES (fixtures: tests/fixtures/node/gres/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pitstop.config import load_settings
from pitstop.models import CheckStatus
from pitstop.node import gres
from pitstop.node.check import CheckContext, run_checks
from pitstop.node.status import NodeParseError
from tests.cluster.conftest import dev_cluster_env, slurm_cluster  # noqa: F401  (session fixtures)
from tests.node.fake_nvml import FakeGpu, FakeNvml
from tests.node.tool_recordings import RecordedRunner, missing

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "node" / "gres"


@pytest.mark.parametrize(("value", "gpus"), [
    ("gpu:h100:8", 8), ("gpu:h100:8(S:0-1)", 8), ("gpu:8", 8), ("gpu:a100:4,gpu:h100:4", 8),
    ("gpu:h100:8(S:0-1),nic:2", 8), ("nic:2", 0), ("(null)", 0), ("gpu", 1), ("gpu:2K", 2048),
    ("gpu:h100:no_consume:2", 2), ("gpu:h100:4(S:0,1),gpu:a100:2(S:1)", 6),
])
def test_gres_syntax(value: str, gpus: int) -> None:
    assert gres.parse_gres(value) == gpus


def test_scontrol_and_nvidia_smi_outputs() -> None:
    assert gres.parse_scontrol_node((FIX / "scontrol_show_node_devcluster.txt").read_text()) == "gpu:h100:8"
    assert gres.parse_scontrol_node((FIX / "scontrol_show_node_socket_bound.txt").read_text()) == "gpu:h100:8(S:0-1)"
    assert gres.parse_nvidia_smi_list((FIX / "nvidia_smi_L_8.txt").read_text()) == 8
    assert gres.parse_nvidia_smi_list((FIX / "nvidia_smi_L_7_mig.txt").read_text()) == 7  # MIG lines are not GPUs
    with pytest.raises(NodeParseError, match="no Gres="):
        gres.parse_scontrol_node("Node gpu99 not found")


def test_verdicts() -> None:
    kw = {"gres": "gpu:h100:8", "visible_source": "nvml"}
    assert gres.process_gres(8, 8, **kw).status is CheckStatus.OK
    missing_gpu = gres.process_gres(7, 8, **kw)
    assert missing_gpu.status is CheckStatus.FAIL
    assert missing_gpu.summary.startswith("only 7 of 8 GPUs visible (Slurm GRES gpu:h100:8)")
    assert gres.process_gres(9, 8, **kw).status is CheckStatus.WARN
    assert gres.process_gres(None, 8, **kw, unavailable="no driver").status is CheckStatus.UNAVAILABLE
    assert gres.process_gres(None, None, gres=None, visible_source="", unavailable="no scontrol").status \
        is CheckStatus.UNAVAILABLE
    assert gres.process_gres(None, 0, gres="(null)", visible_source="").status is CheckStatus.OK  # a CPU node


def test_nvidia_smi_fallback_and_expected_override() -> None:
    runner = RecordedRunner({("scontrol", "show", "node"): FIX / "scontrol_show_node_socket_bound.txt",
                             ("nvidia-smi", "-L"): FIX / "nvidia_smi_L_7_mig.txt"})
    broken_nvml = FakeNvml([], init_error=9)  # NVML_ERROR_DRIVER_NOT_LOADED
    result = gres.check(CheckContext(load_settings(), runner=runner, nvml=broken_nvml, node="gpu17"))
    assert result.status is CheckStatus.FAIL and result.details["visible_source"] == "nvidia-smi"
    assert runner.calls[0] == ["scontrol", "show", "node", "-o", "gpu17"]
    override = load_settings(node_check={"expected_gpus": 2})
    ok = gres.check(CheckContext(override, runner=RecordedRunner({}), nvml=FakeNvml([FakeGpu(), FakeGpu()])))
    assert ok.status is CheckStatus.OK and ok.details["expected"] == 2


def test_no_slurm_is_unavailable() -> None:
    result = gres.check(CheckContext(load_settings(), runner=RecordedRunner({("scontrol",): missing("scontrol")})))
    assert result.status is CheckStatus.UNAVAILABLE and "scontrol is not installed" in result.summary


def test_dev_cluster_gres_with_real_scontrol(slurm_cluster, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The dev cluster declares gpu:h100:8: 7 (fake) GPUs FAIL, no driver (this machine) is UNAVAILABLE."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf_path))
    node = slurm_cluster.nodes[0]
    seven = gres.check(CheckContext(load_settings(), nvml=FakeNvml([FakeGpu() for _ in range(7)]), node=node))
    assert seven.status is CheckStatus.FAIL and seven.details["gres"] == "gpu:h100:8", seven
    here = run_checks(["gres"], CheckContext(load_settings(), node=node)).checks[0]
    assert here.status in (CheckStatus.OK, CheckStatus.UNAVAILABLE) and here.details.get("expected") == 8, here


def test_runs_on_this_machine() -> None:
    report = run_checks(["gres"], CheckContext(load_settings()))
    assert report.checks[0].status in (CheckStatus.OK, CheckStatus.UNAVAILABLE), report.checks[0]
