"""`pitstop classify`: name the root cause of each log, or score the classifier on a corpus.

Fast path: no Prefect, no SQLModel. The classifier package is imported inside the command.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer


def _verdict_json(path: str, verdict) -> str:
    return json.dumps(
        {
            "path": path,
            "cause": verdict.cause.value,
            "signature": verdict.signature,
            "confidence": verdict.confidence,
            "evidence": [{"line": e.line, "text": e.text, "source": e.source} for e in verdict.evidence],
            "hint": verdict.hint,
            "alternatives": [a.model_dump(mode="json") for a in verdict.alternatives],
            "decided_by": verdict.decided_by,
        },
        ensure_ascii=False,
    )


def _print_human(path: str, verdict) -> None:
    typer.echo(f"{path}: {verdict.cause.value} ({verdict.signature}, confidence {verdict.confidence:.2f})")
    if verdict.hint:
        typer.echo(f"  hint: {verdict.hint}")
    for e in verdict.evidence:
        where = f"{e.source}:{e.line}" if e.line else e.source
        typer.echo(f"  {where}: {e.text}")
    if verdict.decided_by:
        typer.echo(f"  decided by: {verdict.decided_by}")
    for alt in verdict.alternatives:
        typer.echo(f"  or {alt.cause.value} ({alt.confidence:.2f}): {alt.tells_apart}")


def _print_report(report, as_json: bool) -> None:
    if as_json:
        typer.echo(report.model_dump_json())
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"classifier on {report.total} examples")
    for column in ("cause", "precision", "recall", "F1", "support", "predicted"):
        table.add_column(column, justify="left" if column == "cause" else "right")
    for s in report.per_cause:
        table.add_row(s.cause.value, f"{s.precision:.3f}", f"{s.recall:.3f}", f"{s.f1:.3f}",
                      str(s.support), str(s.predicted))
    console.print(table)
    console.print(f"macro-F1 {report.macro_f1:.3f}   accuracy {report.accuracy:.3f}")
    if report.unambiguous is not None:
        u = report.unambiguous
        console.print(f"without the {report.total - u.total} rows marked ambiguous: "
                      f"macro-F1 {u.macro_f1:.3f}   accuracy {u.accuracy:.3f}")
    console.print(_confusion_table(report))
    for m in report.mistakes:
        flag = "  (ambiguous)" if m.get("ambiguous") else ""
        console.print(f"  wrong: {m['id']}: {m['label']} -> {m['predicted']}{flag}", highlight=False)


def _confusion_table(report):
    """Rows are numbered and the columns carry the numbers, so 16 causes fit 80 columns."""
    from rich.table import Table

    causes = [s.cause.value for s in report.per_cause]
    matrix = Table(title="confusion (row: true, column: predicted)",
                   box=None, padding=(0, 0, 0, 1), header_style="bold underline")
    matrix.add_column("true label", no_wrap=True)
    for number in range(1, len(causes) + 1):
        matrix.add_column(str(number), justify="right", no_wrap=True)
    for number, truth in enumerate(causes, start=1):
        row = report.confusion.get(truth, {})
        matrix.add_row(f"{number:>2} {truth}", *[str(row.get(p, "")) or "." for p in causes])
    return matrix


# Paragraphs are single lines: the help renderer keeps line breaks as written.
CLASSIFY_HELP = "\n\n".join([
    "Name the root cause of a failed job from its log(s), with the lines that prove it.",
    "Each PATH gets its own verdict, in order. A PATH that cannot be read (missing, no permission, "
    "a directory, a FIFO or a device) gets an error line instead (with --json: {\"path\", \"error\"}) "
    "and the other paths are still classified. An unreadable --kernel-log is reported once and the "
    "verdicts are given without it.",
    "Exit codes:\n"
    "  0  every path classified\n"
    "  1  some path (or the kernel log) could not be read\n"
    "  2  usage error (no PATH, unknown --engine, unreadable --eval corpus)",
])


def _read_error(path: Path, exc: Exception) -> str:
    """ClassifyError already names the path; anything else gets the same shape."""
    text = str(exc)
    return text if text.startswith("cannot classify") else f"cannot classify {path}: {text}"


def _report_error(path: Path, message: str, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps({"path": str(path), "error": message}, ensure_ascii=False))
    else:
        typer.echo(f"{path}: error: {message}", err=True)
    sys.stdout.flush()


def classify(
    paths: Optional[list[Path]] = typer.Argument(None, help="log files; each gets its own verdict"),
    state: Optional[str] = typer.Option(None, "--state", help="Slurm job state, e.g. TIMEOUT"),
    exit_code: Optional[int] = typer.Option(None, "--exit-code", help="the job's exit code"),
    signal: Optional[int] = typer.Option(None, "--signal", help="signal that killed the job"),
    kernel_log: Optional[Path] = typer.Option(None, "--kernel-log", help="node kernel log (dmesg/journal)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object per PATH, one per line"),
    eval_corpus: Optional[Path] = typer.Option(None, "--eval", help="score on a labelled JSONL corpus"),
    engine: Optional[str] = typer.Option(None, "--engine", help="hyperscan | re2 | re (default: fastest)"),
    only_ids: Optional[list[str]] = typer.Option(None, "--only-ids", help="with --eval: only rows whose id starts with this, e.g. I- (repeatable)"),
    no_learned: bool = typer.Option(False, "--no-learned", help="rules only: never the learned fallback"),
    labelled: bool = typer.Option(False, "--labelled", help="with --eval: score on the site's labelled incidents (`pitstop label`)"),
) -> None:
    from pitstop.models import SchedulerFacts

    _warn_site_rules()
    if labelled or (eval_corpus is not None and str(eval_corpus) == "--labelled"):
        # `--eval --labelled`: --eval takes a value, so click hands it "--labelled" as the corpus.
        _eval_labelled(engine, not no_learned, as_json)
        return
    if eval_corpus is not None:
        from classifiers.evaluate import CorpusError, evaluate_corpus

        try:
            _print_report(evaluate_corpus(eval_corpus, engine=engine, only_ids=only_ids or (),
                                          learned=not no_learned), as_json)
        except CorpusError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        return
    if not paths:
        typer.echo("error: give at least one log PATH (or --eval CORPUS.jsonl)", err=True)
        raise typer.Exit(2)

    from classifiers import ClassifyError, LogScan, classify_files, classify_scanned, scan_logs
    from pitstop.files import open_regular

    try:
        classify_files([], engine=engine)  # checks --engine (and compiles the rules) once
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    facts = None
    if state is not None or exit_code is not None or signal is not None:
        facts = SchedulerFacts(state=state, exit_code=exit_code, signal=signal)
    failed = False
    kernel = LogScan(sources=[])
    if kernel_log is not None:  # scanned once, not once per path
        try:
            kernel = scan_logs([kernel_log], engine=engine, open_log=open_regular, sources=["kernel"])
        except (ClassifyError, OSError, ValueError) as exc:
            failed = True
            _report_error(kernel_log, _read_error(kernel_log, exc) + " (--kernel-log; verdicts are without it)", as_json)
    for path in paths:
        try:
            scan = scan_logs([path], engine=engine, open_log=open_regular)
        except (ClassifyError, OSError, ValueError) as exc:  # this path only: go on with the others
            failed = True
            _report_error(path, _read_error(path, exc), as_json)
            continue
        verdict = classify_scanned(LogScan(sources=[*scan.sources, *kernel.sources],
                                           excerpts=[*scan.excerpts, *kernel.excerpts]), facts, learned=not no_learned)
        if as_json:
            typer.echo(_verdict_json(str(path), verdict))
        else:
            _print_human(str(path), verdict)
        sys.stdout.flush()
    if failed:
        raise typer.Exit(1)


def _warn_site_rules() -> None:
    """A site rule file that cannot be used is left out (built-in rules only): say so, once."""
    from classifiers.rules import RULES
    from classifiers.site_rules import configured_table

    problem = configured_table(RULES).problem
    if problem:
        typer.secho(f"warning: {problem}", err=True, fg="yellow")


def _eval_labelled(engine: str | None, learned: bool, as_json: bool) -> None:
    """The same report as a corpus eval, on the newest label of each labelled incident."""
    from classifiers.evaluate import evaluate_examples
    from pitstop.cli.cmd_label import labelled_examples
    from pitstop.cli.cmd_records import _store

    _, store = _store()
    examples = labelled_examples(store)
    store.dispose()
    if not examples:
        typer.echo("error: no labelled incidents yet (`pitstop label INCIDENT CAUSE` adds one)", err=True)
        raise typer.Exit(2)
    _print_report(evaluate_examples(examples, engine=engine, learned=learned), as_json)


def register(app: typer.Typer) -> None:
    app.command("classify", help=CLASSIFY_HELP)(classify)
