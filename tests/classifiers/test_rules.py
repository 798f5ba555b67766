"""Every rule row has a real-format case, and each case gets exactly its cause and signature."""

from __future__ import annotations

import re

import pytest

from classifiers import RULES, classify_text, hint_for
from classifiers.engines import ENGINE_NAMES
from classifiers.rule_model import Rule

from .cases import CASES


@pytest.mark.parametrize(("text", "cause", "signature"), CASES, ids=[c[2] + f"-{i}" for i, c in enumerate(CASES)])
def test_case_gets_its_cause_and_signature(text: str, cause: str, signature: str) -> None:
    verdict = classify_text(text)
    assert (verdict.cause.value, verdict.signature) == (cause, signature)
    assert verdict.evidence and verdict.evidence[0].line >= 1
    assert verdict.hint


def test_every_rule_has_a_case() -> None:
    covered = {signature for _, _, signature in CASES}
    missing = [
        rule.signature
        for rule in RULES
        if not any(re.fullmatch(re.escape(rule.signature).replace(r"\{1\}", ".+"), s) for s in covered)
    ]
    assert missing == []


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_every_engine_agrees_on_every_case(engine: str) -> None:
    for text, cause, signature in CASES:
        verdict = classify_text(text, engine=engine)
        assert (verdict.cause.value, verdict.signature) == (cause, signature), (engine, text)


def test_patterns_that_could_span_lines_are_rejected() -> None:
    with pytest.raises(ValueError, match="one line"):
        Rule(signature="x", cause="unknown", pattern=r"foo\sbar", priority=1, hint="h")
    with pytest.raises(ValueError, match="one line"):
        Rule(signature="x", cause="unknown", pattern=r"foo[^x]*bar", priority=1, hint="h")


def test_every_built_in_row_passes_the_full_check_its_loading_skips() -> None:
    # The shipped tables load without `re`'s compile (Rule.built_in): this is where it is paid.
    for rule in RULES:
        assert Rule.model_validate(rule.model_dump()) == rule
        re.compile(rule.pattern.encode(), re.IGNORECASE if rule.caseless else 0)


def test_a_built_in_row_is_still_kept_on_one_line_and_a_bad_regex_is_caught_outside_it() -> None:
    with pytest.raises(ValueError, match="one line"):
        Rule.built_in(signature="x", cause="unknown", pattern=r"foo\sbar", priority=1, hint="h")
    with pytest.raises(ValueError, match="not a valid regex"):
        Rule(signature="x", cause="unknown", pattern=r"foo(bar", priority=1, hint="h")


def test_hint_lookup_for_templated_and_fixed_signatures() -> None:
    assert "bus" in hint_for("xid-79")
    assert "RMA" in hint_for("xid-62") or "reset" in hint_for("xid-62")
    assert "user bug" in hint_for("xid-13")  # the catalog says Xid 13 implicates the application
    assert "Xid catalog" in hint_for("xid-999")  # not in the catalog: the generic row
    assert hint_for("py-ZeroDivisionError") == hint_for("py-SomeOtherError") != ""
    assert "time limit" in hint_for("slurm-state-timeout")
    assert hint_for("no-such-signature") == ""


def test_xid_causes_follow_the_node_catalog() -> None:
    """Every catalogued Xid gets the cause its `implicates` names, and the node's FAIL Xids win over
    an NCCL timeout while IGNORE ones never do: one source of truth, pitstop.node.xid."""
    from pitstop.models import CheckStatus
    from pitstop.node.xid import ACTION_STATUS, XID_CATALOG

    from classifiers.xid_rules import CAUSE_OF

    watchdog = "[E ProcessGroupNCCL.cpp:828] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)"
    for xid, info in XID_CATALOG.items():
        line = f"NVRM: Xid (PCI:0000:3b:00): {xid}, pid=1, {info.description}"
        verdict = classify_text(line)
        assert verdict.signature == f"xid-{xid}" and verdict.cause is CAUSE_OF[info.implicates], xid
        combined = classify_text(watchdog + "\n" + line).cause
        if ACTION_STATUS.get(info.immediate) is CheckStatus.FAIL and verdict.cause.value != "software_bug":
            assert combined is verdict.cause, xid
        if ACTION_STATUS.get(info.immediate) is CheckStatus.OK:
            assert combined.value == "nccl_timeout", xid


def test_bare_xid_events_name_their_xid_and_prose_does_not() -> None:
    """A fleet monitor's "Xid 149, NETIR_LINK_DOWN ..." is the catalogued Xid; "no Xid 79 since the
    reboot" (no comma after the number) is prose, not an event."""
    from pitstop.node.xid import XID_CATALOG

    from classifiers.xid_rules import CAUSE_OF

    for xid, info in XID_CATALOG.items():
        verdict = classify_text(f"health-monitor: node gpu-17 GPU 3 Xid {xid}, {info.description}")
        assert verdict.signature == f"xid-{xid}" and verdict.cause is CAUSE_OF[info.implicates], xid
    assert classify_text("Xid: 9999, some future event").signature == "xid-9999"
    assert classify_text("no Xid 79 since the last reboot\n").cause.value == "unknown"


def test_node_reasons_naming_an_xid_are_xid_events_and_other_prose_is_not() -> None:
    """A scheduler's reason on a node out of service ("offline ... Xid 74", "Reason=Xid 79") is the
    catalogued Xid; the same words without the node's state or Reason= are not."""
    assert classify_text("x3014c0s19b0n0       offline,resv-exclusive Xid 74 -- GPUs need reseat").signature == "xid-74"
    assert classify_text("   Reason=Xid 79 GPU fell off the bus [root@2025-03-01T10:00:00]").signature == "xid-79"
    assert classify_text("we saw Xid 74 once last year\n", learned=False).cause.value == "unknown"


def test_a_bare_amdgpu_init_failure_is_not_called_the_gpu() -> None:
    """'Fatal error during GPU init' alone is also what a host BIOS without Above 4G decoding prints;
    only the VBIOS failing to run ("gpu post error", "atombios stuck") names the card."""
    bare = "[    9.292134] amdgpu 0000:83:00.0: amdgpu: Fatal error during GPU init"
    assert classify_text(bare, learned=False).cause.value == "unknown"
    assert classify_text(bare + "\namdgpu 0000:83:00.0: gpu post error!").signature == "amdgpu-init-failed"


def test_the_re2_set_has_room_for_a_site_s_rules_beyond_the_built_in_table() -> None:
    # RE2's default 8 MiB budget was full with the built-in table: one more bounded repeat failed.
    pytest.importorskip("re2")
    from classifiers.engines import Re2SetEngine

    extra = [Rule(signature=f"site-{n}", cause="software_bug", priority=50, hint="h",
                  pattern=f"site{n} error[^\\n]{{0,60}}in module[^\\n]{{0,60}}failed") for n in range(20)]
    engine = Re2SetEngine([*RULES, *extra])
    assert engine.first_matches(b"x\nsite7 error here in module m: failed\n") != {}


@pytest.mark.parametrize(("number", "log_line"), [
    (11, "Segmentation fault (core dumped)"), (6, "Aborted (core dumped)"), (7, "Bus error (core dumped)"),
    (4, "Illegal instruction (core dumped)"), (9, "worker killed by signal SIGKILL"),
])
def test_a_signal_says_the_same_in_the_log_and_in_the_scheduler_facts(number: int, log_line: str) -> None:
    # One death, two witnesses: the job's own line and Slurm's signal number must agree on the
    # cause and the hint, or the operator reads two stories about the same crash.
    from classifiers.signal_meaning import SIGNALS
    from pitstop.models import SchedulerFacts

    from_log = classify_text(log_line)
    from_facts = classify_text("", SchedulerFacts(signal=number))
    assert from_log.cause == from_facts.cause == SIGNALS[number].cause
    assert hint_for(from_log.signature) == SIGNALS[number].hint
    assert from_facts.signature == f"signal-{number}-{SIGNALS[number].name}"


def test_only_pip_s_own_build_summaries_are_a_failed_package_build() -> None:
    # TensorRT says "Failed to build engine" of its engine, and a UnicodeDecodeError says
    # "unexpected end of data": neither is a package build or a truncated shard.
    trt = "[TRT] [E] 4: [network.cpp::validate::3100] Error Code 4: Internal Error\nFailed to build engine"
    assert classify_text(trt).signature != "pip-build-failed"
    assert classify_text("Failed to build av\nERROR: Failed to build installable wheels for some pyproject.toml "
                         "based projects (av)").signature == "pip-build-failed"
