"""Loading policies: the built-in default, user YAML, and errors that name the file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from pitstop.config import load_settings
from pitstop.models import Cause
from pitstop.policy import ActionKind, PolicyError, load_policy, parse_policy
from pitstop.policy.model import ESCALATE, FaultBehaviour, policy_from_settings

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "policy"


def test_default_policy_is_package_data_and_complete() -> None:
    p = load_policy()
    assert p.uncovered_causes() == []
    assert p.approval_required == {ActionKind.REBOOT, ActionKind.RMA_TICKET}
    assert [str(r.kind) for r in p.ladders["reset_gpu"].rungs] == ["gpu_reset", "reboot", "diag", "rma_ticket"]
    assert p.fault_for("xid-79").behaviour is FaultBehaviour.STICKY
    assert p.fault_for("xid-94").behaviour is FaultBehaviour.SELF_CLEARING
    assert p.fault_for("xid-31").occurrences == 3
    # Xids without a rule of their own get their NVIDIA bucket's plan; a rule naming one wins.
    assert p.rule_for(Cause.GPU_HARDWARE, "xid-95").bucket == "RESET_GPU"
    assert p.rule_for(Cause.GPU_HARDWARE, "xid-79").ladder == "reboot"
    assert p.rule_for(Cause.GPU_MEMORY, "xid-64").bucket is None and p.rule_for(Cause.GPU_MEMORY, "xid-64").ladder == "hardware"
    assert p.rule_for(Cause.GPU_HARDWARE, "xid-999").signature is None  # not in the catalog: catch-all


def test_short_forms_in_yaml() -> None:
    p = parse_policy("""
rules:
  - cause: gpu_hardware
    ladder: l
    actions: [drain, {diag: 3}, {requeue: {time_limit_factor: 2}}, escalate]
ladders:
  l: {rungs: [gpu_reset]}
""")
    acts = p.rules[0].actions
    assert [str(a.kind) for a in acts] == ["drain", "diag", "requeue", ESCALATE]
    assert acts[1].level == 3 and acts[2].time_limit_factor == 2


def test_user_file_from_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "policy.yaml"
    f.write_text("max_same_failures: 7\nrules:\n  - cause: unknown\n    actions: [notify_ops]\n")
    monkeypatch.setenv("PITSTOP_POLICY__FILE", str(f))
    p = policy_from_settings(load_settings())
    assert p.max_same_failures == 7 and Cause.GPU_HARDWARE in p.uncovered_causes()


def test_validation_error_names_file_and_field() -> None:
    with pytest.raises(PolicyError) as e:
        load_policy(FIX / "bad_field.yaml")
    msg = str(e.value)
    assert "bad_field.yaml" in msg and "storm_guard.partition_max_percent" in msg


def test_unknown_action_lists_the_known_ones() -> None:
    with pytest.raises(PolicyError, match=r"rules\.0\.actions\.1.*unknown action 'explode'.*gpu_reset"):
        load_policy(FIX / "unknown_action.yaml")


def test_missing_ladder_is_named() -> None:
    with pytest.raises(PolicyError, match="uses 'escalate' but names no ladder"):
        parse_policy("rules:\n  - cause: unknown\n    actions: [escalate]\n", source="x.yaml")
    with pytest.raises(PolicyError, match="names ladder 'nope'"):
        parse_policy("rules:\n  - cause: unknown\n    ladder: nope\n    actions: [drain]\n")


@pytest.mark.parametrize(
    "content,match",
    [
        (b"", "must be a YAML mapping"),
        (b"- just\n- a list\n", "must be a YAML mapping"),
        (b"rules: [unclosed\n", "not valid YAML"),
        (b"rules: []\n", "rules"),
        (b"typo_field: 1\nrules:\n  - cause: unknown\n    actions: [none]\n", "typo_field"),
        (b"rules:\n  - cause: gremlins\n    actions: [none]\n", r"rules\.0\.cause"),
    ],
)
def test_bad_policy_text(tmp_path: Path, content: bytes, match: str) -> None:
    f = tmp_path / "odd name ü.yaml"
    f.write_bytes(content)
    with pytest.raises(PolicyError, match=match) as e:
        load_policy(f)
    assert "odd name ü.yaml" in str(e.value)


def test_not_utf8_missing_and_huge(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="not UTF-8"):
        load_policy(FIX / "not_utf8.yaml")
    with pytest.raises(PolicyError, match="cannot read policy .*missing.yaml"):
        load_policy(tmp_path / "missing.yaml")
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (2 * 1024 * 1024))
    with pytest.raises(PolicyError, match="refusing more than"):
        load_policy(big)
