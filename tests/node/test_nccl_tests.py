"""Burn-in with nccl-tests (pitstop/node/nccl_tests.py) and its use from a policy's diag step.

Fixtures: tests/fixtures/node/nccl_tests/README.md (the nccl-tests output format, src/util.cu).
busbw = algbw x 2(n-1)/n for AllReduce (nccl-tests doc/PERFORMANCE.md), so one figure per node
type judges any run; wrong values FAIL whatever the speed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pitstop.cli.app import build_app
from pitstop.cluster.base import HostResult, HostStatus
from pitstop.config import BurnInSettings, Settings
from pitstop.models import CheckStatus
from pitstop.node import nccl_tests
from pitstop.node.check import CheckContext, parse_check_names, run_checks
from pitstop.node.registry import CHECKS, default_checks, prolog_checks
from pitstop.node.status import NodeParseError
from pitstop.node.tool import ToolOutput, ToolTimedOut, ToolUnavailable
from pitstop.policy.decide import PlannedAction, make_node_step
from pitstop.policy.model import ActionTemplate, PolicyError, parse_policy

REPO = Path(__file__).resolve().parents[2]
H100 = BurnInSettings(expected_busbw_gbps={"h100-8": 350}, expected_pair_busbw_gbps={"h100-8": 330})
SCONTROL_RECORD = ("NodeName=gpu-node01 Arch=x86_64 CoresPerSocket=56 CPUAlloc=0 CPUTot=224 "
                   "AvailableFeatures=ib,h100-8,nvswitch ActiveFeatures=ib,h100-8,nvswitch "
                   "Gres=gpu:h100:8(S:0-1) NodeAddr=gpu-node01 State=IDLE+DRAIN")


def text(node_fixtures: Path, name: str) -> str:
    return (node_fixtures / "nccl_tests" / name).read_text()


# --- parser ---------------------------------------------------------------------------------

def test_a_full_single_node_sweep_parses_every_size_and_the_footer(node_fixtures):
    run = nccl_tests.parse_all_reduce_perf(text(node_fixtures, "good_h100x8.txt"))
    assert run.complete
    assert len(run.rows) == 31  # 8 B .. 8 GiB doubling
    assert run.rows[0].size_bytes == 8 and run.rows[-1].size_bytes == 8 * 1024**3
    assert run.rows[-1].oop_busbw_gbps == 481.63 and run.rows[-1].ip_busbw_gbps == 476.86
    assert run.rows[-1].oop_time_us == 31211.5
    assert run.out_of_bounds == 0 and run.wrong == 0
    assert run.avg_busbw_gbps == 167.78
    assert run.hosts == ["gpu-node01"] * 8
    assert run.peak_busbw_gbps == 481.63


def test_wrong_elements_and_out_of_bounds_are_read(node_fixtures):
    run = nccl_tests.parse_all_reduce_perf(text(node_fixtures, "wrong_values_h100x8.txt"))
    assert run.out_of_bounds == 7
    assert run.wrong == 7
    assert [r.size_bytes for r in run.rows if r.wrong] == [1048576]


def test_a_crashed_run_parses_as_incomplete_with_the_failure_line(node_fixtures):
    run = nccl_tests.parse_all_reduce_perf(text(node_fixtures, "crashed_h100x8.txt"))
    assert not run.complete
    assert run.rows[-1].size_bytes == 134217728
    assert "Test NCCL failure common.cu:1279" in run.errors[0]


def test_unchecked_results_read_as_not_wrong():
    line = ("   134217728      33554432     float     sum      -1   1211.2  110.81  110.81      0"
            "   1211.8  110.76  110.76    N/A\n")
    run = nccl_tests.parse_all_reduce_perf(line)
    assert run.rows[0].oop_wrong == 0 and run.rows[0].ip_wrong is None and run.wrong == 0


@pytest.mark.parametrize("junk", ["", "\n\n", "Hello world\nthis is not nccl-tests\n", "\x00\xff" * 100])
def test_output_that_is_not_nccl_tests_is_a_parse_error(junk):
    with pytest.raises(NodeParseError, match="no nccl-tests output"):
        nccl_tests.parse_all_reduce_perf(junk)


def test_a_huge_output_parses_in_bounded_time(node_fixtures):
    body = text(node_fixtures, "good_h100x8.txt")
    started = time.monotonic()
    run = nccl_tests.parse_all_reduce_perf(body * 2000)  # ~8 MB, the Runner's cap
    assert time.monotonic() - started < 30
    assert run.complete


# --- judgement ------------------------------------------------------------------------------

def judged(node_fixtures, name: str, node_type: str | None = "h100-8", returncode: int = 0):
    return nccl_tests.judge_output(text(node_fixtures, name), H100, node_type=node_type, what="all_reduce_perf",
                                   expected=H100.expected_busbw_gbps, returncode=returncode)


def test_a_healthy_node_passes_with_its_numbers(node_fixtures):
    result = judged(node_fixtures, "good_h100x8.txt")
    assert result.status is CheckStatus.OK
    assert "481.63 GB/s" in result.summary and "350" in result.summary
    assert result.details["avg_busbw_gbps"] == 167.78
    assert result.details["judged_busbw_gbps"] == 481.63


def test_a_slow_node_fails_below_the_margin(node_fixtures):
    result = judged(node_fixtures, "slow_h100x8.txt")
    assert result.status is CheckStatus.FAIL
    assert "67 % of the expected 350" in result.summary and "85%" in result.summary


def test_the_margin_is_a_setting():
    run = nccl_tests.NcclRun(rows=[nccl_tests.NcclRow(
        size_bytes=1 << 30, count=1 << 28, type="float", redop="sum", oop_time_us=1.0, oop_algbw_gbps=170.0,
        oop_busbw_gbps=300.0, oop_wrong=0, ip_time_us=1.0, ip_algbw_gbps=170.0, ip_busbw_gbps=299.0, ip_wrong=0)],
        out_of_bounds=0, avg_busbw_gbps=120.0)
    assert nccl_tests.judge(run, expected_busbw_gbps=350, min_fraction=0.85, what="x").status is CheckStatus.OK
    assert nccl_tests.judge(run, expected_busbw_gbps=350, min_fraction=0.9, what="x").status is CheckStatus.FAIL


def test_wrong_values_fail_even_at_full_speed_and_without_an_expected_figure(node_fixtures):
    for node_type in ("h100-8", None):
        result = judged(node_fixtures, "wrong_values_h100x8.txt", node_type=node_type)
        assert result.status is CheckStatus.FAIL
        assert "wrong results" in result.summary and "1048576 B" in result.summary


def test_a_crashed_run_fails_and_says_why(node_fixtures):
    result = judged(node_fixtures, "crashed_h100x8.txt", returncode=1)
    assert result.status is CheckStatus.FAIL
    assert "did not finish (25 size(s) measured)" in result.summary
    assert "unhandled cuda error" in result.summary


def test_a_truncated_output_fails(node_fixtures):
    full = text(node_fixtures, "good_h100x8.txt")
    result = nccl_tests.judge_output(full[: len(full) // 2], H100, node_type="h100-8", what="x",
                                     expected=H100.expected_busbw_gbps, returncode=-9)
    assert result.status is CheckStatus.FAIL and "exit status -9" in result.summary


def test_no_expected_figure_reports_the_numbers_without_judging_speed(node_fixtures):
    result = judged(node_fixtures, "slow_h100x8.txt", node_type="a100-8")
    assert result.status is CheckStatus.OK
    assert "no expected figure for node type 'a100-8'" in result.summary


def test_a_binary_missing_under_srun_is_unavailable(node_fixtures):
    result = judged(node_fixtures, "srun_binary_missing.txt", returncode=2)
    assert result.status is CheckStatus.UNAVAILABLE
    assert "not installed" in result.summary


def test_a_pair_is_judged_against_the_network_figure(node_fixtures):
    result = nccl_tests.judge_pair(text(node_fixtures, "pair_h100x8_two_nodes.txt"), "gpu-node01", "gpu-node02",
                                   H100, node_type="h100-8")
    assert result.status is CheckStatus.OK, result.summary
    assert result.details["ranks"] == 16 and result.details["hosts"] == ["gpu-node01", "gpu-node02"]
    assert "of the expected 330" in result.summary
    slow = nccl_tests.judge_pair(text(node_fixtures, "pair_h100x8_two_nodes.txt"), "gpu-node01", "gpu-node02",
                                 BurnInSettings(expected_pair_busbw_gbps={"h100-8": 480}), node_type="h100-8")
    assert slow.status is CheckStatus.FAIL


def test_a_pair_run_on_other_hosts_is_not_passed(node_fixtures):
    result = nccl_tests.judge_pair(text(node_fixtures, "pair_h100x8_two_nodes.txt"), "gpu-node01", "gpu-node07",
                                   H100, node_type="h100-8")
    assert result.status is CheckStatus.WARN and "not on both of gpu-node01, gpu-node07" in result.summary


def test_the_node_type_comes_from_settings_or_from_slurm_features():
    assert nccl_tests.parse_features(SCONTROL_RECORD) == ["ib", "h100-8", "nvswitch"]
    assert nccl_tests.parse_features("NodeName=x AvailableFeatures=(null) Gres=gpu:8") == []

    def scontrol(argv, timeout_s):
        assert argv[1:] == ["show", "node", "-o", "gpu-node01"]
        return ToolOutput(argv=argv, returncode=0, stdout=SCONTROL_RECORD)

    assert nccl_tests.resolve_node_type("gpu-node01", H100, scontrol, "scontrol", 5)[0] == "h100-8"
    pinned = H100.model_copy(update={"node_type": "h100-8-custom"})
    assert nccl_tests.resolve_node_type("gpu-node01", pinned, scontrol, "scontrol", 5) == ("h100-8-custom", "burn_in.node_type")

    def no_scontrol(argv, timeout_s):
        raise ToolUnavailable("scontrol is not installed on this node")

    node_type, why = nccl_tests.resolve_node_type("gpu-node01", H100, no_scontrol, "scontrol", 5)
    assert node_type is None and "scontrol is not installed" in why


# --- the check ------------------------------------------------------------------------------

def test_nccl_is_registered_but_never_in_the_default_or_prolog_set():
    assert "nccl" in CHECKS
    assert "nccl" not in default_checks() and "nccl" not in prolog_checks()
    assert parse_check_names("nccl", default_checks()) == ["nccl"]


def test_the_check_is_unavailable_on_this_machine_without_nccl_tests(tmp_path, monkeypatch):
    monkeypatch.setenv("PITSTOP_HOME", str(tmp_path))
    settings = Settings()
    if shutil.which(settings.burn_in.all_reduce_perf_path):
        pytest.skip("nccl-tests is installed here")
    report = run_checks(["nccl"], CheckContext(settings, node="localhost"))
    (result,) = report.checks
    assert result.status is CheckStatus.UNAVAILABLE
    assert "all_reduce_perf is not installed" in result.summary
    assert report.overall is CheckStatus.OK


def recorded(outputs: dict[str, ToolOutput | Exception]):
    """Recorded tool output for hardware absent here (8 GPUs); keyed by argv[0]."""
    calls = []

    def runner(argv, timeout_s):
        calls.append((argv, timeout_s))
        out = outputs[argv[0]]
        if isinstance(out, Exception):
            raise out
        return out

    return runner, calls


def test_the_check_runs_the_configured_command_and_judges_it(node_fixtures, tmp_path, monkeypatch):
    monkeypatch.setenv("PITSTOP_HOME", str(tmp_path))
    settings = Settings(burn_in=H100.model_copy(update={"all_reduce_perf_args": ["-b", "1G", "-e", "8G", "-f", "2", "-g", "8"],
                                                        "timeout_s": 123}))
    good = text(node_fixtures, "good_h100x8.txt")
    runner, calls = recorded({
        "all_reduce_perf": ToolOutput(argv=[], returncode=0, stdout=good),
        "scontrol": ToolOutput(argv=[], returncode=0, stdout=SCONTROL_RECORD),
    })
    result = nccl_tests.check(CheckContext(settings, node="gpu-node01", runner=runner))
    assert calls[0] == (["all_reduce_perf", "-b", "1G", "-e", "8G", "-f", "2", "-g", "8"], 123)
    assert result.status is CheckStatus.OK and result.details["node_type"] == "h100-8"
    assert result.details["node_type_source"] == "Slurm features"


def test_a_hung_run_fails_with_the_setting_to_raise(tmp_path, monkeypatch):
    monkeypatch.setenv("PITSTOP_HOME", str(tmp_path))
    runner, _ = recorded({"all_reduce_perf": ToolTimedOut("all_reduce_perf -b 8 did not answer within 900 s")})
    result = nccl_tests.check(CheckContext(Settings(), node="gpu-node01", runner=runner))
    assert result.status is CheckStatus.FAIL and "burn_in.timeout_s" in result.summary


# --- policy: a diag step with burn-in checks ------------------------------------------------

POLICY = """\
version: 1
ladders:
  burn:
    rungs: [reboot, {{diag: {{level: 4, checks: {checks}}}}}, rma_ticket]
rules:
  - cause: gpu_hardware
    ladder: burn
    actions: [drain, escalate, {{resume: {{after_diag_passes: true}}}}]
"""


def test_a_diag_with_nccl_and_dcgm_level_4_is_accepted_and_planned():
    policy = parse_policy(POLICY.format(checks="[nccl]"))
    template = policy.ladders["burn"].rungs[1]
    assert template.level == 4 and template.checks == ["nccl"]
    step = make_node_step(template, "gpu-node01", "pitstop: test")
    assert step.diag_level == 4 and step.diag_checks == ["nccl"]
    assert step.describe().endswith("diag gpu-node01 (level 4) with nccl")


def test_an_unknown_check_name_is_rejected_with_the_known_ones():
    with pytest.raises(PolicyError) as err:
        parse_policy(POLICY.format(checks="[ncl]"))
    message = "\n".join(i.render(err.value.source) for i in err.value.issues)
    assert "unknown node check(s) ncl" in message and "nccl" in message and message.startswith("<text>:4: ladders.burn.rungs[1].checks")


def test_checks_belong_to_diag_steps_only():
    with pytest.raises(ValueError, match="'checks' belongs to a diag step"):
        ActionTemplate.model_validate({"reboot": {"checks": ["nccl"]}})


def test_pitstop_policy_check_accepts_nccl_and_rejects_a_typo(tmp_path):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(POLICY.format(checks="[nccl]"))
    bad.write_text(POLICY.format(checks="[nccl, gpu-burn]"))
    ok = CliRunner().invoke(build_app(), ["policy", "check", str(good)])
    assert ok.exit_code == 0, ok.output
    assert "valid" in ok.output
    no = CliRunner().invoke(build_app(), ["policy", "check", str(bad)])
    assert no.exit_code == 1
    assert "unknown node check(s) gpu-burn" in no.output


def test_the_default_policy_still_plans_no_burn_in():
    from pitstop.policy.model import load_policy

    policy = load_policy(None)
    templates = [t for ladder in policy.ladders.values() for t in ladder.rungs]
    templates += [t for rule in policy.rules for t in rule.actions]
    assert templates and not any(t.checks for t in templates)


# --- the diag executor: burn-in run as `node-check --checks nccl` on the node ----------------

class LocalRunner:
    """Runs the argv on this machine: the transport SSH would be on a cluster (host ignored)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env, self.calls = env, []

    def run(self, host, argv, timeout_s=None):
        self.calls.append((argv, timeout_s))
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=self.env, check=False)
        except FileNotFoundError:
            return HostResult(host=host, status=HostStatus.OK, exit_code=127, error=f"{argv[0]}: command not found")
        return HostResult(host=host, status=HostStatus.OK, exit_code=proc.returncode,
                          stdout=proc.stdout, stderr=proc.stderr)


def test_diag_with_nccl_runs_the_burn_in_and_does_not_pass_a_node_it_could_not_test(tmp_path):
    from tasks.act import _diag

    env = {**os.environ, "PITSTOP_HOME": str(tmp_path)}
    settings = Settings(home=tmp_path)
    settings.pipeline.node_check_argv = [str(REPO / ".venv" / "bin" / "pitstop"), "node-check", "--json",
                                         "--checks", "disk"]
    if shutil.which("dcgmi") or shutil.which(settings.burn_in.all_reduce_perf_path):
        pytest.skip("DCGM or nccl-tests is installed here")

    class Ctx:
        pass

    ctx = Ctx()
    ctx.settings, ctx.runner = settings, LocalRunner(env)
    facts: dict = {}
    action = PlannedAction(seq=1, kind="diag", target="localhost", target_type="node", diag_level=1,
                           diag_checks=["nccl"])
    result = _diag(ctx, action, facts)
    burn_argv, burn_timeout = ctx.runner.calls[-1]
    assert burn_argv[-2:] == ["--checks", "nccl"]
    assert burn_timeout >= settings.burn_in.timeout_s
    assert result.details["passed"] is False and result.details["could_not_run"] is True
    assert "burn-in could not run (nccl: all_reduce_perf is not installed" in result.summary
    assert facts["diag"]["localhost"]["burn_in_checks"] == ["nccl"]
