"""`pitstop policy check FILE`: every error with its line and field; exit 0 valid, 1 invalid, 2 unreadable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pitstop.cli.app import build_app
from pitstop.policy import load_policy, parse_policy
from pitstop.policy.locate import PolicyIssue, format_path, load_with_nodes, locate
from pitstop.policy.model import MAX_POLICY_BYTES, PolicyError, PolicyUnreadable

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "pitstop" / "policy" / "default_policy.yaml"

# Line numbers below are 1-based lines of this text.
BROKEN = """\
version: 1
storm_guard:
  window_minutes: -5
ladders:
  gpu:
    rungs: [gpu_reset, reboot]
rules:
  - cause: gpu_hardware
    signature: xid-79
    actions:
      - drain
      - rebot
      - diag: {level: three}
  - cause: gremlins
    actions: [notify_ops]
  - cause: numerical
    actoins: [notify_user]
"""


def _check(*args: str) -> "Result":
    return CliRunner().invoke(build_app(), ["policy", "check", *args])


def _write(tmp_path: Path, text: str | bytes, name: str = "policy.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def test_every_error_is_named_with_its_line_and_field_at_once(tmp_path: Path) -> None:
    path = _write(tmp_path, BROKEN)
    result = _check(str(path))
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    assert lines[:-1] == [
        f"{path}:3: storm_guard.window_minutes: Input should be greater than 0 (got -5)",
        f"{path}:12: rules[0].actions[1]: unknown action 'rebot'; known actions: requeue, drain, "
        "reboot, gpu_reset, resume, diag, rma_ticket, notify_user, notify_ops, none, escalate",
        f"{path}:13: rules[0].actions[2].level: Input should be a valid integer, unable to parse "
        "string as an integer (got 'three')",
        f"{path}:14: rules[1].cause: 'gremlins' is not one of 'gpu_hardware', 'gpu_memory', "
        "'nccl_timeout', 'network_fabric', 'cuda_oom', 'host_oom', 'numerical', 'software_bug', "
        "'environment', 'storage_io', 'time_limit', 'preempted', 'node_failure', 'crash_signal', "
        "'success' or 'unknown'",
        f"{path}:16: rules[2].actions: required field is missing",
        f"{path}:17: rules[2].actoins: unknown field 'actoins' (did you mean 'actions'?); fields "
        "here: " + ", ".join(_rule_fields()),
    ]
    assert lines[-1] == f"{path}: 6 errors; this policy cannot be used"


def _rule_fields() -> list[str]:
    from pitstop.policy.model import Rule

    return list(Rule.model_fields)


def test_policy_error_carries_the_same_structured_issues(tmp_path: Path) -> None:
    """The flows get the same (line, loc, msg) list as the CLI, and a message that lists them."""
    with pytest.raises(PolicyError) as e:
        load_policy(_write(tmp_path, BROKEN))
    issues = e.value.issues
    assert all(isinstance(i, PolicyIssue) for i in issues)
    assert [(i.line, i.path) for i in issues] == [
        (3, "storm_guard.window_minutes"), (12, "rules[0].actions[1]"), (13, "rules[0].actions[2].level"),
        (14, "rules[1].cause"), (16, "rules[2].actions"), (17, "rules[2].actoins"),
    ]
    line, loc, msg = issues[1]
    assert (line, loc) == (12, ("rules", 0, "actions", 1)) and msg.startswith("unknown action 'rebot'")
    text = str(e.value)
    assert text.startswith(f"invalid remediation policy {tmp_path / 'policy.yaml'}:")
    assert "  line 12: rules.0.actions.1: unknown action 'rebot'" in text


def test_unknown_ladder_points_at_the_rule_that_names_it(tmp_path: Path) -> None:
    text = ("ladders:\n  gpu:\n    rungs: [reboot]\nrules:\n  - cause: unknown\n    actions: [notify_ops]\n"
            "  - cause: gpu_hardware\n    ladder: gpu_typo\n    actions: [escalate]\n")
    result = _check(str(_write(tmp_path, text)))
    assert result.exit_code == 1
    assert result.stdout.splitlines()[0] == (
        f"{tmp_path / 'policy.yaml'}:7: rules[1]: (gpu_hardware:*) names ladder 'gpu_typo'; ladders: gpu"
    )


def test_bad_yaml_names_its_line(tmp_path: Path) -> None:
    text = "rules:\n  - cause: unknown\n    actions: [drain, reboot\n  - cause: numerical\n"
    result = _check(str(_write(tmp_path, text)))
    assert result.exit_code == 1
    first = result.stdout.splitlines()[0]
    assert first.startswith(f"{tmp_path / 'policy.yaml'}:4: not valid YAML: ")
    assert "Traceback" not in result.output


def test_non_utf8_names_the_line_of_the_bad_byte(tmp_path: Path) -> None:
    path = _write(tmp_path, b"rules:\n  - cause: unknown\n    # caf\xe9\n    actions: [drain]\n")
    result = _check(str(path))
    assert result.exit_code == 1
    assert result.stdout.splitlines()[0] == f"{path}:3: not UTF-8 text (invalid continuation byte at byte 35)"


def test_huge_file_is_refused_without_parsing(tmp_path: Path) -> None:
    path = _write(tmp_path, b"# padding\n" * (MAX_POLICY_BYTES // 10 + 1))
    result = _check(str(path))
    assert result.exit_code == 1
    assert f"too big: {path.stat().st_size} bytes, the limit is {MAX_POLICY_BYTES}" in result.stdout


def test_a_large_file_with_many_errors_lists_each_one_in_file_order(tmp_path: Path) -> None:
    rules = "".join(f"  - cause: unknown\n    actions: [notify_ops, bad{i}]\n" for i in range(400))
    path = _write(tmp_path, "rules:\n" + rules)
    result = _check(str(path), "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["valid"] is False and len(report["errors"]) == 400
    assert [(e["line"], e["loc"]) for e in report["errors"]] == [
        (3 + 2 * i, f"rules[{i}].actions[1]") for i in range(400)
    ]
    assert "unknown action 'bad399'" in report["errors"][-1]["msg"]
    with pytest.raises(PolicyError) as e:  # the message stays readable; the issues have them all
        load_policy(path)
    assert len(e.value.issues) == 400 and "and 380 more" in str(e.value)


@pytest.mark.parametrize("make", ["missing", "directory", "fifo", "device"])
def test_a_file_that_cannot_be_read_is_exit_2(tmp_path: Path, make: str) -> None:
    path = {"missing": tmp_path / "nope.yaml", "directory": tmp_path, "fifo": tmp_path / "pipe",
            "device": Path("/dev/zero")}[make]
    if make == "fifo":
        os.mkfifo(path)  # opening it for reading would wait for a writer forever
    result = _check(str(path))
    assert result.exit_code == 2
    assert f"cannot read policy {path}" in result.stderr
    assert {"missing": "No such file", "directory": "a directory", "fifo": "a FIFO",
            "device": "a character device"}[make] in result.stderr
    with pytest.raises(PolicyUnreadable):
        load_policy(path)


def test_the_built_in_default_passes_with_a_summary() -> None:
    policy = load_policy()
    for args in ([], [str(DEFAULT)]):
        result = _check(*args)
        assert result.exit_code == 0, result.output
        assert result.stdout.count("\n") == 1
        assert f"valid: {len(policy.rules)} rules, {len(policy.ladders)} ladders" in result.stdout
    assert "warning" not in result.stdout  # every cause has a catch-all rule


def test_the_configured_policy_is_checked_without_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PITSTOP_POLICY__FILE", str(_write(tmp_path, BROKEN)))
    assert _check().exit_code == 1


def test_causes_without_catch_all_are_warnings_not_errors(tmp_path: Path) -> None:
    text = "rules:\n  - cause: gpu_hardware\n    signature: xid-79\n    actions: [drain]\n  - cause: unknown\n    actions: [notify_ops]\n"
    result = _check(str(_write(tmp_path, text)))
    assert result.exit_code == 0
    line = result.stdout.strip()
    assert line.startswith(f"{tmp_path / 'policy.yaml'}: valid: 2 rules, 0 ladders; warning: no catch-all rule for gpu_hardware, ")
    assert "unknown," not in line and line.endswith("(they get the fallback: notify_ops)")
    report = json.loads(_check(str(tmp_path / "policy.yaml"), "--json").stdout)
    assert "gpu_hardware" in report["uncovered_causes"] and "unknown" not in report["uncovered_causes"]


def test_the_real_command_line(tmp_path: Path) -> None:
    path = _write(tmp_path, BROKEN)
    proc = subprocess.run([sys.executable, "-m", "pitstop.cli.entry", "policy", "check", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and f"{path}:12: rules[0].actions[1]: unknown action 'rebot'" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "pitstop.cli.entry", "policy", "check", "a.yaml", "b.yaml"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2


# --- the locator on its own ------------------------------------------------------------------


def test_locate_falls_back_to_the_nearest_parent_that_exists() -> None:
    _, root = load_with_nodes("a:\n  b:\n    - x\n    - {c: 1}\n")
    assert locate(root, ("a", "b", 1, "c")).line == 4
    found = locate(root, ("a", "b", 7, "c"))  # no item 7: the list, named by its key `b`
    assert (found.line, found.depth) == (2, 2)
    found = locate(root, ("a", "zz"))
    assert (found.line, found.depth) == (1, 1)
    assert locate(root, ()).line == 1


def test_a_block_value_is_named_by_its_key_line() -> None:
    with pytest.raises(PolicyError) as e:
        parse_policy("rules:\n  - cause: unknown\n    actions: [drain]\nstorm_guard:\n  - 1\n")
    assert [(i.line, i.path) for i in e.value.issues] == [(4, "storm_guard")]


def test_merge_keys_and_short_forms_are_followed() -> None:
    text = ("defaults: &deep\n  level: 9\n"
            "rules:\n  - cause: unknown\n    actions:\n      - diag:\n          <<: *deep\n      - diag: 7\n")
    with pytest.raises(PolicyError) as e:
        parse_policy(text)
    assert [(i.line, i.path) for i in e.value.issues] == [
        (1, "defaults"),  # not a policy field
        (2, "rules[0].actions[0].level"),  # the value comes from the anchor on line 2
        (8, "rules[0].actions[1].level"),  # `diag: 7` is {kind: diag, level: 7}
    ]


def test_format_path() -> None:
    assert format_path(("rules", 3, "actions", 1)) == "rules[3].actions[1]"
    assert format_path(()) == "" and format_path(("storm_guard", "window_minutes")) == "storm_guard.window_minutes"


def test_policy_error_survives_pickling(tmp_path: Path) -> None:
    """Prefect serialises the exception of a failed task: the issues must come back whole."""
    import pickle

    for path in (_write(tmp_path, BROKEN), tmp_path / "missing.yaml"):
        with pytest.raises(PolicyError) as e:
            load_policy(path)
        back = pickle.loads(pickle.dumps(e.value))
        assert type(back) is type(e.value) and str(back) == str(e.value)
        assert back.issues == e.value.issues and back.source == e.value.source
