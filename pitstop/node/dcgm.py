"""`dcgmi diag -r LEVEL -j`: run it with a timeout, parse its JSON, interpret its exit code.

Two JSON layouts exist, both taken from NVIDIA's DCGM sources (github.com/NVIDIA/DCGM):
- DCGM 3.x (nvvs/src/JsonOutput.cpp): {"DCGM GPU Diagnostic": {"test_categories": [{"category",
  "tests": [{"name", "results": [{"gpu_ids", "status", "warnings": [{"warning", "error_id"}],
  "info"}]}]}], "version"}} with statuses Pass / Fail / Warn / Skip.
- DCGM 4.x (testing/python3 diag tests): {"DCGM Diagnostic": {"test_categories": [... "tests":
  [{"name", "results": [{"entity_group": "GPU", "entity_id", "status", "warnings": [...]}],
  "test_summary": {"status"}}]}]}, "metadata": {"version", ...}}.
dcgmi exits with a dcgmReturn_t (dcgm_structs.h) truncated to 8 bits: -30 (DCGM_ST_NVVS_ERROR)
means "the diagnostic ran and reported an error", which is a verdict, not a tool failure.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from pitstop.models import CheckResult, CheckStatus
from pitstop.node.status import NodeParseError, worst


class DiagStatus(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


_STATUS_WORDS = {
    "pass": DiagStatus.PASS,
    "passed": DiagStatus.PASS,
    "warn": DiagStatus.WARN,
    "warning": DiagStatus.WARN,
    "fail": DiagStatus.FAIL,
    "failed": DiagStatus.FAIL,
    "skip": DiagStatus.SKIP,
    "skipped": DiagStatus.SKIP,
    "not run": DiagStatus.SKIP,
}
DIAG_TO_CHECK = {
    DiagStatus.PASS: CheckStatus.OK,
    DiagStatus.SKIP: CheckStatus.OK,
    DiagStatus.WARN: CheckStatus.WARN,
    DiagStatus.FAIL: CheckStatus.FAIL,
}


class DiagResult(BaseModel):
    """One test's result for one GPU (gpu None: a software test covering all GPUs)."""

    category: str
    test: str
    gpu: str | None = None
    status: DiagStatus
    messages: list[str] = Field(default_factory=list)


class DiagReport(BaseModel):
    layout: str = Field(description="dcgm3 | dcgm4")
    version: str | None = None
    results: list[DiagResult] = Field(default_factory=list)
    runtime_error: str | None = None

    @property
    def status(self) -> CheckStatus:
        if self.runtime_error:
            return CheckStatus.WARN
        return worst(DIAG_TO_CHECK[r.status] for r in self.results)


# dcgmReturn_t -> (meaning, what it says about the node). Only codes dcgmi diag plausibly returns.
DCGMI_EXIT_CODES: dict[int, tuple[str, CheckStatus]] = {
    0: ("DCGM_ST_OK", CheckStatus.OK),
    -1: ("DCGM_ST_BADPARAM: dcgmi was called wrongly", CheckStatus.UNAVAILABLE),
    -3: ("DCGM_ST_GENERIC_ERROR", CheckStatus.WARN),
    -6: ("DCGM_ST_NOT_SUPPORTED: this GPU or level is not supported", CheckStatus.UNAVAILABLE),
    -7: ("DCGM_ST_INIT_ERROR", CheckStatus.UNAVAILABLE),
    -8: ("DCGM_ST_NVML_ERROR: NVML failed under DCGM", CheckStatus.FAIL),
    -11: ("DCGM_ST_TIMEOUT", CheckStatus.WARN),
    -17: ("DCGM_ST_NO_PERMISSION", CheckStatus.UNAVAILABLE),
    -18: ("DCGM_ST_GPU_IS_LOST: a GPU is no longer reachable", CheckStatus.FAIL),
    -19: ("DCGM_ST_RESET_REQUIRED: a GPU needs a reset", CheckStatus.FAIL),
    -21: ("DCGM_ST_CONNECTION_NOT_VALID: nv-hostengine is not running or unreachable", CheckStatus.UNAVAILABLE),
    -22: ("DCGM_ST_GPU_NOT_SUPPORTED", CheckStatus.UNAVAILABLE),
    -25: ("DCGM_ST_LIBRARY_NOT_FOUND", CheckStatus.UNAVAILABLE),
    -29: ("DCGM_ST_REQUIRES_ROOT", CheckStatus.UNAVAILABLE),
    -30: ("DCGM_ST_NVVS_ERROR: the diagnostic ran and reported an error", CheckStatus.FAIL),
    -34: ("DCGM_ST_IN_USE: the GPUs are busy", CheckStatus.WARN),
    -39: ("DCGM_ST_DIAG_ALREADY_RUNNING", CheckStatus.WARN),
    -40: ("DCGM_ST_DIAG_BAD_JSON: the diagnostic returned unparsable JSON", CheckStatus.WARN),
    -41: ("DCGM_ST_DIAG_BAD_LAUNCH: nvvs could not be started", CheckStatus.UNAVAILABLE),
    -43: ("DCGM_ST_DIAG_THRESHOLD_EXCEEDED: a field crossed its error threshold", CheckStatus.FAIL),
    -44: ("DCGM_ST_INSUFFICIENT_DRIVER_VERSION", CheckStatus.UNAVAILABLE),
    -51: ("DCGM_ST_NVVS_ISOLATE_ERROR: the diagnostic says isolate this GPU", CheckStatus.FAIL),
    -52: ("DCGM_ST_NVVS_BINARY_NOT_FOUND", CheckStatus.UNAVAILABLE),
    -53: ("DCGM_ST_NVVS_KILLED: the diagnostic was killed by a signal", CheckStatus.WARN),
}


JSON_DECIDES = {0, -30}


def interpret_exit_code(returncode: int) -> tuple[str, CheckStatus]:
    """What dcgmi's exit status means. The process status is the dcgmReturn_t modulo 256."""
    if returncode in DCGMI_EXIT_CODES:
        return DCGMI_EXIT_CODES[returncode]
    signed = returncode - 256 if returncode > 127 else returncode
    if signed in DCGMI_EXIT_CODES:
        return DCGMI_EXIT_CODES[signed]
    if returncode < 0:  # subprocess reports death by signal as -N
        return (f"dcgmi killed by signal {-returncode}", CheckStatus.WARN)
    return (f"dcgmi exited {returncode} (dcgmReturn_t {signed})", CheckStatus.WARN)


def _status(value: Any, where: str) -> DiagStatus:
    word = str(value).strip().lower() if value is not None else ""
    if word not in _STATUS_WORDS:
        raise NodeParseError(f"dcgmi diag JSON: unknown status {value!r} in {where}")
    return _STATUS_WORDS[word]


def _messages(result: dict) -> list[str]:
    out: list[str] = []
    for key in ("warnings", "errors"):
        for item in result.get(key) or []:
            if isinstance(item, dict):
                text = item.get("warning") or item.get("error") or item.get("message") or ""
                code = item.get("error_id")
                out.append(f"{text} (error_id {code})" if code is not None else str(text))
            else:
                out.append(str(item))
    out.extend(str(i) for i in (result.get("info") or []) if isinstance(result.get("info"), list))
    return out


def _gpu_of(result: dict) -> str | None:
    if "entity_id" in result:
        group = str(result.get("entity_group", "GPU"))
        return str(result["entity_id"]) if group.upper() == "GPU" else f"{group}:{result['entity_id']}"
    ids = result.get("gpu_ids", result.get("gpu_id"))
    return None if ids is None else str(ids)


def parse_diag_json(text: str | bytes) -> DiagReport:
    """Parse `dcgmi diag -j` output (DCGM 3.x or 4.x). Raises `NodeParseError` on anything else."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    start = text.find("{")  # older dcgmi printed a banner line before the JSON
    if not text.strip() or start < 0:
        raise NodeParseError("dcgmi diag printed no JSON document (empty or non-JSON output)")
    try:
        doc = json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise NodeParseError(f"dcgmi diag JSON is truncated or corrupt: {exc.msg} at char {exc.pos}") from exc
    if not isinstance(doc, dict):
        raise NodeParseError("dcgmi diag JSON is not an object")
    if isinstance(doc.get("DCGM Diagnostic"), dict):
        layout, body = "dcgm4", doc["DCGM Diagnostic"]
        version = (doc.get("metadata") or {}).get("version") or body.get("version")
    elif isinstance(doc.get("DCGM GPU Diagnostic"), dict):
        layout, body = "dcgm3", doc["DCGM GPU Diagnostic"]
        version = body.get("version")
    else:
        raise NodeParseError(f"dcgmi diag JSON has neither 'DCGM Diagnostic' nor 'DCGM GPU Diagnostic' (keys: {sorted(doc)[:5]})")
    categories = body.get("test_categories")
    runtime_error = body.get("runtime_error") or doc.get("runtime_error")
    if categories is None and runtime_error:
        return DiagReport(layout=layout, version=_str(version), runtime_error=str(runtime_error))
    if not isinstance(categories, list):
        raise NodeParseError("dcgmi diag JSON: 'test_categories' is missing or not a list")
    report = DiagReport(layout=layout, version=_str(version), runtime_error=_str(runtime_error))
    for category in categories:
        if not isinstance(category, dict) or not isinstance(category.get("tests"), list):
            raise NodeParseError("dcgmi diag JSON: a test category has no 'tests' list")
        cat_name = str(category.get("category", "?"))
        for test in category["tests"]:
            if not isinstance(test, dict) or "name" not in test:
                raise NodeParseError(f"dcgmi diag JSON: a test in {cat_name!r} has no name")
            results = [r for r in test.get("results") or [] if r is not None]  # 3.x can leave null slots
            where = f"{cat_name}/{test['name']}"
            if not results and isinstance(test.get("test_summary"), dict):
                results = [{**test["test_summary"], "gpu_ids": None}]
            for result in results:
                if not isinstance(result, dict):
                    raise NodeParseError(f"dcgmi diag JSON: a result of {where} is not an object")
                report.results.append(
                    DiagResult(category=cat_name, test=str(test["name"]), gpu=_gpu_of(result),
                               status=_status(result.get("status"), where), messages=_messages(result))
                )
    return report


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def summarize(report: DiagReport, level: int) -> CheckResult:
    bad = [r for r in report.results if r.status in (DiagStatus.FAIL, DiagStatus.WARN)]
    bad.sort(key=lambda r: r.status is not DiagStatus.FAIL)
    status = report.status
    if report.runtime_error:
        summary = f"dcgmi diag -r {level} could not run its tests: {report.runtime_error}"
    elif not bad:
        summary = f"dcgmi diag -r {level}: {len(report.results)} result(s) passed or skipped"
    else:
        first = bad[0]
        gpu = f" on GPU {first.gpu}" if first.gpu is not None else ""
        message = f": {first.messages[0]}" if first.messages else ""
        summary = f"dcgmi diag -r {level}: {first.test} {first.status.value}{gpu}{message}"[:400]
        if len(bad) > 1:
            summary += f" (+{len(bad) - 1} more)"
    return CheckResult(
        name="dcgm", status=status, summary=summary,
        details={"level": level, "layout": report.layout, "dcgm_version": report.version,
                 "results": [r.model_dump() for r in report.results]},
    )


def check_dcgm(level: int, *, dcgmi: str = "dcgmi", timeout_s: float = 900.0) -> CheckResult:
    """Run `dcgmi diag -r level -j` and turn its JSON and exit code into one CheckResult."""
    if level not in (1, 2, 3, 4):
        return CheckResult(name="dcgm", status=CheckStatus.UNAVAILABLE, summary=f"DCGM level must be 1-4, not {level}")
    binary = shutil.which(dcgmi)
    if binary is None:
        return CheckResult(name="dcgm", status=CheckStatus.UNAVAILABLE, summary=f"{dcgmi} is not installed on this node")
    argv = [binary, "diag", "-r", str(level), "-j"]
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return CheckResult(name="dcgm", status=CheckStatus.WARN,
                           summary=f"dcgmi diag -r {level} did not finish within {timeout_s:g} s")
    except OSError as exc:
        return CheckResult(name="dcgm", status=CheckStatus.UNAVAILABLE, summary=f"dcgmi could not be run: {exc}")
    return interpret_run(level, proc.returncode, proc.stdout, proc.stderr)


def interpret_run(level: int, returncode: int, stdout: bytes | str, stderr: bytes | str) -> CheckResult:
    """Combine dcgmi's exit code and its JSON; the JSON wins when present, the code when not."""
    meaning, code_status = interpret_exit_code(returncode)
    err = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr
    try:
        report = parse_diag_json(stdout)
    except NodeParseError as exc:
        status = code_status if code_status is not CheckStatus.OK else CheckStatus.WARN
        return CheckResult(
            name="dcgm", status=status,
            summary=f"dcgmi diag -r {level}: {meaning}; {exc}",
            details={"level": level, "exit_code": returncode, "stderr": err.strip()[-1000:]},
        )
    result = summarize(report, level)
    result.details.update({"exit_code": returncode, "exit_meaning": meaning})
    # NVVS_ERROR only says "some test did not pass" (dcgmi returns it for benign warnings too):
    # the document decides. Codes such as ISOLATE or GPU_IS_LOST are verdicts of their own.
    if _signed(returncode) not in JSON_DECIDES and code_status is not CheckStatus.UNAVAILABLE:
        result.status = worst([result.status, code_status])
    return result


def _signed(returncode: int) -> int:
    return returncode - 256 if returncode > 127 else returncode
