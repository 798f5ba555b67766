"""dcgmi diag JSON (DCGM 3.x and 4.x layouts), exit codes, and running the tool."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pitstop.models import CheckStatus
from pitstop.node.dcgm import (
    DiagStatus,
    check_dcgm,
    interpret_exit_code,
    interpret_run,
    parse_diag_json,
)
from pitstop.node.status import NodeParseError


def fixture(node_fixtures: Path, name: str) -> str:
    return (node_fixtures / "dcgm" / name).read_text()


def test_dcgm3_level1_all_pass(node_fixtures: Path) -> None:
    report = parse_diag_json(fixture(node_fixtures, "dcgm3_level1_pass.json"))
    assert report.layout == "dcgm3" and report.version == "3.3.5"
    assert len(report.results) == 9 and report.results[0].gpu == "0,1"
    assert report.results[-1].status is DiagStatus.SKIP and "not supported" in report.results[-1].messages[0]
    assert report.status is CheckStatus.OK


def test_dcgm3_level3_per_gpu_fail_and_warn(node_fixtures: Path) -> None:
    report = parse_diag_json(fixture(node_fixtures, "dcgm3_level3_memory_fail.json"))
    by = {(r.test, r.gpu): r for r in report.results}
    assert by[("GPU Memory", "1")].status is DiagStatus.FAIL
    assert "12 errors" in by[("GPU Memory", "1")].messages[0] and "(error_id 56)" in by[("GPU Memory", "1")].messages[0]
    assert by[("PCIe", "1")].status is DiagStatus.WARN and by[("PCIe", "0")].status is DiagStatus.PASS
    assert ("Targeted Power", "0") in by  # the null slot JsonOutput leaves for a missing GPU is skipped
    result = interpret_run(3, 226, fixture(node_fixtures, "dcgm3_level3_memory_fail.json"), b"")
    assert result.status is CheckStatus.FAIL
    assert result.summary.startswith("dcgmi diag -r 3: GPU Memory fail on GPU 1: GPU 1 Memory test failed")
    assert result.details["exit_meaning"].startswith("DCGM_ST_NVVS_ERROR")


def test_dcgm4_layout_entities_and_summaries(node_fixtures: Path) -> None:
    report = parse_diag_json(fixture(node_fixtures, "dcgm4_level2_fail.json"))
    assert report.layout == "dcgm4" and report.version == "4.1.1"
    fail = [r for r in report.results if r.status is DiagStatus.FAIL]
    assert [(r.category, r.test, r.gpu) for r in fail] == [("Integration", "pcie", "1")]
    assert "link width is x8" in fail[0].messages[0]
    assert report.status is CheckStatus.FAIL


def test_dcgm4_runtime_error_is_a_warning_not_a_verdict(node_fixtures: Path) -> None:
    result = interpret_run(2, 0, fixture(node_fixtures, "dcgm4_runtime_error.json"), "")
    assert result.status is CheckStatus.WARN and "in use by another process" in result.summary


@pytest.mark.parametrize(
    "text",
    ["", "   \n", "Error: unable to establish a connection to the specified host: localhost",
     '{"DCGM GPU Diagnostic" : {"test_categories" : [ {"category" : "Deployment", "tests" : [',
     "[1, 2, 3]", '{"something": "else"}', '{"DCGM Diagnostic": {"test_categories": "nope"}}',
     '{"DCGM GPU Diagnostic": {"test_categories": [{"category": "x", "tests": [{"name": "t", "results": [{"status": "Sideways"}]}]}]}}',
     b"\xff\xfe\x00garbage"],
)
def test_truncated_empty_and_garbage_json_is_a_typed_error(text: str | bytes) -> None:
    with pytest.raises(NodeParseError):
        parse_diag_json(text)


def test_truncated_fixture_is_a_typed_error(node_fixtures: Path) -> None:
    full = fixture(node_fixtures, "dcgm4_level2_fail.json")
    with pytest.raises(NodeParseError, match="truncated or corrupt"):
        parse_diag_json(full[: len(full) // 2])


@pytest.mark.parametrize(
    ("code", "name", "status"),
    [(0, "DCGM_ST_OK", CheckStatus.OK), (226, "DCGM_ST_NVVS_ERROR", CheckStatus.FAIL),
     (205, "DCGM_ST_NVVS_ISOLATE_ERROR", CheckStatus.FAIL), (235, "DCGM_ST_CONNECTION_NOT_VALID", CheckStatus.UNAVAILABLE),
     (238, "DCGM_ST_GPU_IS_LOST", CheckStatus.FAIL), (-30, "DCGM_ST_NVVS_ERROR", CheckStatus.FAIL)],
)
def test_exit_codes_are_dcgm_return_values_mod_256(code: int, name: str, status: CheckStatus) -> None:
    meaning, got = interpret_exit_code(code)
    assert meaning.startswith(name) and got is status


def test_unknown_exit_code_is_named_not_hidden() -> None:
    meaning, status = interpret_exit_code(77)
    assert "77" in meaning and status is CheckStatus.WARN


def test_isolate_exit_code_fails_even_when_the_document_passes(node_fixtures: Path) -> None:
    result = interpret_run(1, 205, fixture(node_fixtures, "dcgm3_level1_pass.json"), "")
    assert result.status is CheckStatus.FAIL


def test_no_json_and_no_hostengine_is_unavailable() -> None:
    result = interpret_run(1, 235, b"", b"Error: unable to establish a connection to the specified host: localhost\n")
    assert result.status is CheckStatus.UNAVAILABLE and "nv-hostengine" in result.summary


def _fake_dcgmi(tmp_path: Path, body: str) -> Path:
    tool = tmp_path / "dcgmi"
    tool.write_text("#!/bin/sh\n" + body)
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return tool


def test_missing_dcgmi_is_unavailable() -> None:
    result = check_dcgm(1, dcgmi="/nonexistent/dcgmi")
    assert result.status is CheckStatus.UNAVAILABLE and "not installed" in result.summary


def test_runs_the_tool_with_argv_and_reads_its_exit_code(tmp_path: Path, node_fixtures: Path) -> None:
    doc = node_fixtures / "dcgm" / "dcgm4_level2_fail.json"
    tool = _fake_dcgmi(tmp_path, f'echo "$@" > "{tmp_path}/argv"\ncat "{doc}"\nexit 226\n')
    result = check_dcgm(2, dcgmi=str(tool), timeout_s=10)
    assert (tmp_path / "argv").read_text().split() == ["diag", "-r", "2", "-j"]
    assert result.status is CheckStatus.FAIL and result.details["exit_code"] == 226


def test_a_hanging_dcgmi_times_out(tmp_path: Path) -> None:
    tool = _fake_dcgmi(tmp_path, "exec sleep 30\n")
    result = check_dcgm(1, dcgmi=str(tool), timeout_s=0.5)
    assert result.status is CheckStatus.WARN and "did not finish within 0.5 s" in result.summary


def test_level_out_of_range() -> None:
    assert check_dcgm(7).status is CheckStatus.UNAVAILABLE
    assert os.environ.get("PATH")  # the run above must not have touched the environment
