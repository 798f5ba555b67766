"""The site rule file: validated with line and field, loaded after the built-in table, never fatal.

Log lines are real tools' formats: Apptainer/Singularity's user lookup failure on a node without
the job owner's account (apptainer/singularity#5757: "FATAL:   Couldn't determine user account
information: user: unknown userid 551"), PyTorch's CUDA OOM message, and the kernel's NVRM Xid
line (NVIDIA Xid catalog).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from classifiers import LogScan, classify_files, classify_scanned, classify_text, hint_for, scan_logs
from classifiers.engines import ENGINE_NAMES
from classifiers.hits import Hit
from classifiers.rules import RULES
from classifiers.site_rules import (
    SiteRule,
    SiteRulesError,
    append_rule,
    configured_path,
    configured_table,
    load_site_rules,
    parse_site_rules,
)
from pitstop.config import load_settings
from pitstop.models import Cause

APPTAINER = ("WARNING: Could not lookup the current user's information: user: unknown userid 41021\n"
             "FATAL:   Couldn't determine user account information: user: unknown userid 41021\n")
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB\n"
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"

SITE = """\
# our cluster's own words
rules:
  - name: site-apptainer-unknown-user
    cause: environment
    pattern: "couldn't determine user account information: user: unknown userid [0-9]+"
    priority: 72
    hint: "the node lacks the job owner's account (sssd/LDAP): fix the node, requeue"
"""


def _engines() -> list[str]:
    out = []
    for name in ENGINE_NAMES:
        try:
            classify_text("", engine=name)
        except Exception:  # noqa: BLE001 - an optional engine that is not installed here
            continue
        out.append(name)
    return out


def test_site_rule_names_a_cause_the_builtins_do_not(isolated_home: Path) -> None:
    assert classify_text(APPTAINER).cause is not Cause.ENVIRONMENT  # what the site file is for
    isolated_home.mkdir(parents=True, exist_ok=True)
    (isolated_home / "site-rules.yaml").write_text(SITE)
    for engine in _engines():  # every engine gives the same verdict with the site row
        verdict = classify_text(APPTAINER, engine=engine)
        assert (verdict.cause, verdict.signature) == (Cause.ENVIRONMENT, "site-apptainer-unknown-user"), engine
        assert verdict.evidence[0].line == 2
    assert hint_for("site-apptainer-unknown-user").startswith("the node lacks")


def test_configured_path_follows_the_settings(isolated_home: Path, tmp_path: Path, monkeypatch) -> None:
    assert configured_path() == load_settings().site_rules_path == isolated_home / "site-rules.yaml"
    monkeypatch.setenv("PITSTOP_CLASSIFIER__SITE_RULES", str(tmp_path / "ours.yaml"))
    assert configured_path() == load_settings().site_rules_path == tmp_path / "ours.yaml"
    monkeypatch.delenv("PITSTOP_CLASSIFIER__SITE_RULES")
    config = tmp_path / "config.toml"
    config.write_text(f'[classifier]\nsite_rules = "{tmp_path / "from-toml.yaml"}"\n')
    monkeypatch.setenv("PITSTOP_CONFIG", str(config))
    assert configured_path() == load_settings().site_rules_path == tmp_path / "from-toml.yaml"


def test_precedence_priority_then_line_then_builtin_first() -> None:
    both = OOM.strip() + " site-marker-oom\n"
    builtin_oom = next(r for r in RULES if r.signature == "cuda-oom")
    same = parse_site_rules(
        f"rules:\n  - {{name: site-same, cause: software_bug, pattern: site-marker-oom, priority: {builtin_oom.priority}, hint: x}}\n",
        "s.yaml", RULES)
    table = (*RULES, *same.rules)
    # Same line, same priority: the built-in row (earlier in the table) wins.
    assert classify_text(both, rules=table).signature == "cuda-oom"
    higher = parse_site_rules(
        f"rules:\n  - {{name: site-higher, cause: software_bug, pattern: site-marker-oom, priority: {builtin_oom.priority + 1}, hint: x}}\n",
        "s.yaml", RULES)
    assert classify_text(both, rules=(*RULES, *higher.rules)).signature == "site-higher"
    # A site row never outranks the top hardware band: priority is capped at 100.
    with pytest.raises(SiteRulesError, match=r"priority"):
        parse_site_rules("rules:\n  - {name: site-x, cause: software_bug, pattern: abc def, priority: 101, hint: x}\n",
                         "s.yaml", RULES)
    assert classify_text(XID79 + both, rules=(*RULES, *higher.rules)).cause is Cause.GPU_HARDWARE


def test_builtin_names_are_refused_with_line_and_field() -> None:
    text = (
        "rules:\n"
        "  - name: cuda-oom\n"
        "    cause: cuda_oom\n    pattern: our allocator gave up\n    priority: 80\n    hint: x\n"
        "  - name: xid-999\n"
        "    cause: gpu_hardware\n    pattern: our xid words\n    priority: 90\n    hint: x\n"
        "  - name: site-dup\n    cause: storage_io\n    pattern: lustre gone\n    priority: 75\n    hint: x\n"
        "  - name: site-dup\n    cause: storage_io\n    pattern: lustre away\n    priority: 75\n    hint: x\n"
    )
    with pytest.raises(SiteRulesError) as err:
        parse_site_rules(text, "site.yaml", RULES)
    rendered = [i.render("site.yaml") for i in err.value.issues]
    assert rendered[0].startswith("site.yaml:2: rules[0].name: 'cuda-oom' is a built-in rule's name")
    assert rendered[1].startswith("site.yaml:7: rules[1].name: 'xid-999' is a built-in rule's name")  # xid-{1}
    assert rendered[2].startswith("site.yaml:17: rules[3].name: 'site-dup' is also the name of rules[2]")
    assert "built-in rules still apply" in str(err.value)


@pytest.mark.parametrize(("body", "line", "needle"), [
    ("rules:\n  - name: site-a\n    cause: environment\n    pattern: 'user\\s+unknown'\n    priority: 70\n    hint: x\n",
     4, "uses '\\\\s'"),
    ("rules:\n  - name: site-a\n    cause: environment\n    pattern: '(ab)\\1 gone'\n    priority: 70\n    hint: x\n",
     4, "Hyperscan"),
    ("rules:\n  - name: site-a\n    cause: environment\n    pattern: '(x)*'\n    priority: 70\n    hint: x\n",
     4, "matches an empty line"),
    ("rules:\n  - name: site-a\n    cause: enviroment\n    pattern: abc def\n    priority: 70\n    hint: x\n",
     3, "is not one of"),
    ("rules:\n  - name: site-a\n    cause: unknown\n    pattern: abc def\n    priority: 70\n    hint: x\n",
     3, "a rule must name a cause"),
    ("rules:\n  - name: site-a\n    cause: environment\n    pattern: abc def\n    priorty: 70\n    hint: x\n",
     2, "priority"),
    ("rules:\n  - name: Site A\n    cause: environment\n    pattern: abc def\n    priority: 70\n    hint: x\n",
     2, "is not a rule name"),
    ("rules:\n  - name: site-a\n    cause: [environment\n", 4, "not valid YAML"),
    ("- just a list\n", 1, "must be a mapping"),
])
def test_bad_rows_name_line_and_field(body: str, line: int, needle: str) -> None:
    if "Hyperscan" in needle:
        pytest.importorskip("hyperscan")
    with pytest.raises(SiteRulesError) as err:
        parse_site_rules(body, "site.yaml", RULES)
    assert any(i.line == line and needle in i.render("site.yaml") for i in err.value.issues), err.value.issues


def test_unknown_field_suggests_the_right_one() -> None:
    with pytest.raises(SiteRulesError) as err:
        parse_site_rules("rules:\n  - {name: site-a, cause: environment, pattern: abc def, priorty: 70, hint: x}\n",
                         "site.yaml", RULES)
    assert any("did you mean 'priority'" in i.msg for i in err.value.issues)


def test_a_bad_file_leaves_the_builtin_table_working(isolated_home: Path) -> None:
    isolated_home.mkdir(parents=True, exist_ok=True)
    site = isolated_home / "site-rules.yaml"
    site.write_text("rules:\n  - name: cuda-oom\n    cause: [oops\n")
    table = configured_table(RULES)
    assert table.rules == RULES and "not valid YAML" in (table.problem or "")
    for engine in _engines():
        assert classify_text(OOM, engine=engine).cause is Cause.CUDA_OOM
    site.write_text(SITE)  # fixed: seen without a restart (the file's stat is the cache key)
    assert configured_table(RULES).problem is None
    assert classify_text(APPTAINER).cause is Cause.ENVIRONMENT


def test_unreadable_fifo_huge_and_binary_files_are_errors_not_hangs(tmp_path: Path) -> None:
    assert load_site_rules(tmp_path / "absent.yaml", RULES).entries == []  # absent: no site rules
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    done: list[BaseException] = []

    def load() -> None:
        try:
            load_site_rules(fifo, RULES)
        except SiteRulesError as exc:
            done.append(exc)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(5)
    assert done and "cannot read" in str(done[0])
    huge = tmp_path / "huge.yaml"
    huge.write_bytes(b"#" * (2 * 1024 * 1024))
    with pytest.raises(SiteRulesError, match="larger than"):
        load_site_rules(huge, RULES)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"rules:\n\xff\xfe\x00")
    with pytest.raises(SiteRulesError, match="not UTF-8"):
        load_site_rules(binary, RULES)
    directory = tmp_path / "dir.yaml"
    directory.mkdir()
    with pytest.raises(SiteRulesError, match="cannot read"):
        load_site_rules(directory, RULES)


def test_a_scan_joined_from_an_older_table_does_not_crash(tmp_path: Path) -> None:
    site = parse_site_rules(SITE, "s.yaml", RULES)
    log = tmp_path / "job.log"
    log.write_text(APPTAINER)
    scan = scan_logs([log], rules=(*RULES, *site.rules))
    assert any(isinstance(h, Hit) and h.rule_index >= len(RULES) for h in scan.sources[0])
    # The wrapper joins scans into a LogScan without their table; the site file is gone by now.
    joined = LogScan(sources=scan.sources)
    assert classify_scanned(joined).cause is Cause.UNKNOWN
    assert classify_files([log], rules=(*RULES, *site.rules)).cause is Cause.ENVIRONMENT


def test_append_keeps_comments_and_reads_back() -> None:
    entry = SiteRule(name="site-new", cause=Cause.STORAGE_IO, pattern="lustre: client evicted", priority=75,
                     hint="Lustre evicted the client: check the node's LNet", note="from incident 4")
    fresh = append_rule("", entry)
    assert [e.name for e in parse_site_rules(fresh, "s", RULES).entries] == ["site-new"]
    kept = append_rule(SITE, entry)
    assert kept.startswith(SITE) and "# our cluster's own words" in kept
    assert [e.name for e in parse_site_rules(kept, "s", RULES).entries] == ["site-apptainer-unknown-user", "site-new"]
    flush_left = "rules:\n- {name: site-a, cause: environment, pattern: abc def, priority: 70, hint: x}\n"
    assert [e.name for e in parse_site_rules(append_rule(flush_left, entry), "s", RULES).entries] == ["site-a", "site-new"]
    empty_list = "# nothing yet\nrules: []  # start here\n"
    assert [e.name for e in parse_site_rules(append_rule(empty_list, entry), "s", RULES).entries] == ["site-new"]
    with pytest.raises(ValueError, match="block list"):
        append_rule("rules: [{name: site-a, cause: environment, pattern: abc def, priority: 70, hint: x}]\n", entry)
