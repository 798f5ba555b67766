"""`pitstop rules check|suggest`: the site rule file the classifier loads after its built-in table.

`check` validates it (line and field of each problem, like `pitstop policy check`); `suggest`
proposes rules for the labelled incidents (`pitstop label`) the rules get wrong, proves each by
re-scoring the labelled incidents and the shipped corpora, and with `--accept` appends them.
The logic is classifiers.suggest and classifiers.site_rules; this module reads and writes.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Optional

import typer

rules_app = typer.Typer(help="The site's own classifier rules: check the file, suggest rules from labels.",
                        no_args_is_help=True)

# The corpora shipped with Pitstop: a suggestion must not break them (absent from an install
# without the tests: then only the labelled incidents are checked, and the output says so).
SHIPPED_CORPORA = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "classifiers"


def _site_path(file: Path | None) -> Path:
    if file is not None:
        return file
    from pitstop.config import ConfigError, load_settings

    try:
        return load_settings().site_rules_path
    except ConfigError as exc:
        typer.secho(f"pitstop rules: {exc}", err=True, fg="red")
        raise typer.Exit(2) from None


CHECK_HELP = "\n\n".join([
    "Validate the site rule file and name the line and field of each error (all of them).",
    "Without FILE: the configured one (classifier.site_rules, PITSTOP_CLASSIFIER__SITE_RULES), else "
    "$PITSTOP_HOME/site-rules.yaml. A missing file is valid: no site rules. Site rows load after the "
    "built-in rows, compete on priority (1-100), and may not reuse a built-in rule's name.",
    "Exit codes:\n  0  valid (or absent)\n  1  invalid (each error printed; the classifier ignores the file)\n"
    "  2  usage error",
])


@rules_app.command("check", help=CHECK_HELP)
def check(
    file: Optional[Path] = typer.Argument(None, help="site rule YAML (default: the configured one)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object: valid, errors [{line, loc, msg}], rules"),
) -> None:
    from classifiers.rules import RULES
    from classifiers.site_rules import SiteRulesError, load_site_rules

    path = _site_path(file)
    try:
        site = load_site_rules(path, RULES)
    except SiteRulesError as exc:
        if as_json:
            typer.echo(json.dumps({"file": str(path), "valid": False, "rules": 0, "errors": [
                {"line": i.line, "loc": i.path, "msg": i.msg} for i in exc.issues]}))
        else:
            for issue in exc.issues:
                typer.echo(issue.render(str(path)))
        raise typer.Exit(1) from None
    if as_json:
        typer.echo(json.dumps({"file": str(path), "valid": True, "rules": len(site.entries), "errors": [],
                               "exists": path.exists()}))
        return
    state = "valid" if path.exists() else "absent (no site rules)"
    typer.echo(f"{path}: {state}: {len(site.entries)} site rules, loaded after {len(RULES)} built-in rows")


def _corpus_examples(paths: list[Path]) -> tuple[list, list[str]]:
    from classifiers.evaluate import CorpusError, load_corpus

    examples, problems = [], []
    for path in paths:
        try:
            rows = load_corpus(path)
        except CorpusError as exc:
            problems.append(str(exc))
            continue
        for ex in rows:
            if ex.path is not None:  # a row that points at a file: read it here (suggest is pure)
                try:
                    ex = ex.model_copy(update={"text": ex.path.read_text(encoding="utf-8", errors="replace"),
                                               "path": None})
                except OSError as exc:
                    problems.append(f"{path}: row {ex.id}: cannot read {ex.path}: {exc.strerror or exc}")
                    continue
            examples.append(ex.model_copy(update={"id": f"{path.stem}:{ex.id}"}))
    return examples, problems


def _predict(ex, rules):
    from classifiers import classify_text

    return classify_text(ex.text or "", ex.facts, ex.kernel, rules=rules)


SUGGEST_HELP = "\n\n".join([
    "Propose site rules for the labelled incidents (`pitstop label`) the rules get wrong.",
    "Each proposal gives the pattern (numbers, hex and deep paths generalised into classes), the cause, its "
    "priority, the incidents it fixes, and every labelled incident or shipped-corpus row it would break, "
    "found by re-scoring them all with the rule added.",
    "--accept appends the proposals that break nothing to the site rule file (comments kept); one that "
    "breaks something is appended only when named with --only.",
])


@rules_app.command("suggest", help=SUGGEST_HELP)
def suggest(
    accept: bool = typer.Option(False, "--accept", help="append the proposals to the site rule file"),
    only: Optional[list[str]] = typer.Option(None, "--only", help="accept only this proposal (repeatable)"),
    corpus: Optional[list[Path]] = typer.Option(None, "--corpus", help="corpora to check against (default: shipped)"),
    file: Optional[Path] = typer.Option(None, "--file", help="site rule file (default: the configured one)"),
    as_json: bool = typer.Option(False, "--json", help="the report as one JSON object"),
) -> None:
    from classifiers.rules import RULES
    from classifiers.site_rules import table_for
    from classifiers.suggest import suggest_rules
    from pitstop.cli.cmd_label import labelled_examples
    from pitstop.cli.cmd_records import _store
    from pitstop.store import labels

    path = _site_path(file)
    table = table_for(path, RULES)
    if table.problem:
        typer.secho(f"pitstop rules suggest: {table.problem}\n(fix it first: `pitstop rules check`)", err=True, fg="red")
        raise typer.Exit(1)
    _, store = _store()
    examples = labelled_examples(store)
    notes = {f"incident {r.incident_id}": r.note for r in labels.latest_labels(store)}
    store.dispose()
    corpora = list(corpus) if corpus else sorted(SHIPPED_CORPORA.glob("*.jsonl"))
    rows, problems = _corpus_examples(corpora)
    if not corpora:
        problems.append(f"no corpus found (looked in {SHIPPED_CORPORA}): breaks are checked on the labelled incidents only")
    report = suggest_rules(examples, rows, table.rules, RULES, _predict, notes=notes)
    for problem in problems:
        typer.secho(f"note: {problem}", err=True, fg="yellow")
    chosen = [s for s in report.suggestions if (s.rule.name in only if only else not s.breaks) and s.fixes]
    if as_json:
        typer.echo(json.dumps({**report.model_dump(mode="json"), "corpus_rows": len(rows),
                               "accepted": [s.rule.name for s in chosen] if accept else []}))
    else:
        _print_report(report, len(rows), path)
    if accept:
        if not chosen:
            typer.echo("nothing to accept (only proposals that fix something and break nothing, or named with --only)")
            raise typer.Exit(1 if report.suggestions else 0)
        _append(path, [s.rule for s in chosen])
        if not as_json:
            typer.echo(f"appended {', '.join(s.rule.name for s in chosen)} to {path}")


def _print_report(report, corpus_rows: int, path: Path) -> None:
    typer.echo(f"{report.wrong} of {report.labelled} labelled incidents are classified wrong by the current rules "
               f"(site rule file {path}); checked against {corpus_rows} corpus rows")
    for s in report.suggestions:
        r = s.rule
        typer.echo(f"\n{r.name}: {r.cause.value}, priority {r.priority}")
        typer.echo(f"  pattern: {r.pattern}")
        typer.echo(f"  e.g.:    {s.sample}")
        typer.echo(f"  fixes:   {', '.join(s.fixes) or 'none (a stronger rule still wins)'}")
        if s.also_fixes:
            typer.echo(f"  also fixes corpus rows: {', '.join(s.also_fixes[:10])}")
        if s.also_matches:
            typer.echo(f"  also matches other causes' rows: {', '.join(s.also_matches[:10])}")
        if s.breaks:
            typer.secho("  BREAKS:  " + "; ".join(f"{b.id} ({b.label.value}: {b.before.value} -> {b.after.value})"
                                                   for b in s.breaks[:10]), fg="red")
        else:
            typer.echo("  breaks:  nothing")
    for u in report.unfixed:
        typer.echo(f"\nno rule for {u.id} ({u.label.value}, classified {u.predicted.value}): {u.why}")


def _append(path: Path, entries) -> None:
    """Append under a lock, re-validate, then replace the file atomically (never a half-written file)."""
    from classifiers.rules import RULES
    from classifiers.site_rules import SiteRulesError, append_rule, load_site_rules, parse_site_rules

    path.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = load_site_rules(path, RULES)
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        for entry in entries:
            try:
                text = append_rule(text, entry)
            except ValueError as exc:
                from classifiers.site_rules import render_rule

                by_hand = "\n".join("  " + line for line in render_rule(entry))
                typer.secho(f"pitstop rules suggest: cannot append to {path}: {exc}; add it by hand:\n{by_hand}",
                            err=True, fg="red")
                raise typer.Exit(1) from None
        try:
            after = parse_site_rules(text, str(path), RULES)
        except SiteRulesError as exc:
            typer.secho(f"pitstop rules suggest: the file would not be valid, left unchanged:\n{exc}", err=True, fg="red")
            raise typer.Exit(1) from None
        if [e.name for e in after.entries] != [*(e.name for e in before.entries), *(e.name for e in entries)]:
            typer.secho(f"pitstop rules suggest: appending to {path} would not keep its rules; left unchanged",
                        err=True, fg="red")
            raise typer.Exit(1)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        os.close(lock)


def register(app: typer.Typer) -> None:
    app.add_typer(rules_app, name="rules")
