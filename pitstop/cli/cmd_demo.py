"""`pitstop demo`: the real remediation flows against the built-in demo cluster.

No Slurm, no GPU: a seeded demo cluster under $PITSTOP_HOME/demo gets faults from the Llama 3
interruption mix, and `post_failure` runs on each failed job. Uses $PREFECT_API_URL when set,
else Prefect's temporary local server (~15 s to start). Never touches a real cluster.
"""

from __future__ import annotations

import os
import shutil
import time

import typer


# journal state -> what the demo table says (a node kept drained is "not done", not a failure)
_WORDS = {"skipped": "not done", "would_do": "would do", "awaiting_approval": "waiting for approval"}
# The demo opens with these, so every run shows the two things a new user should see: a fault that
# climbs the escalation ladder inside one incident (a GPU that stays off the bus after the reboot),
# and a multi-node job whose faulty node is found from the evidence (the host in NCCL's error line
# and that node's `link down`). The rest come from the Llama 3 mix.
SHOWCASE = ("gpu_fell_off_bus", "network_fabric")
# Lines of a report's explanation that say where the incident ended and who was blamed.
_OUTCOME_MARKS = ("suspect ", "escalated within the incident", ": back in service", ": stays drained",
                  ": out of service", ": next step")


def _story_line(line: str) -> str:
    """A suspect line without its evidence excerpt and with only its first reason."""
    head = line.split(" | ")[0]
    return head.split("; ")[0] if head.startswith("suspect ") else head


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        faults: int = typer.Option(4, min=1, max=20, help="failed jobs to inject"),
        seed: int = typer.Option(7, help="seed for the fault mix (same seed, same demo)"),
        fresh: bool = typer.Option(True, help="start from a new demo cluster"),
        approval_timeout: int = typer.Option(
            10, min=1, help="seconds a risky step waits for an answer in the Prefect UI (no answer = deny)"
        ),
    ) -> None:
        """Inject faults into a built-in demo cluster and remediate them with the real flows."""
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        console = Console()
        os.environ["PITSTOP_CLUSTER"] = "demo"  # the demo must never act on a real cluster
        os.environ["PITSTOP_MODE"] = "act"
        # The built-in default (an hour) suits a real cluster, not a demo someone is watching.
        os.environ["PITSTOP_PIPELINE__APPROVAL_TIMEOUT_S"] = str(approval_timeout)
        os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # no internet: no telemetry
        from pitstop.cluster.demo import DemoCluster
        from pitstop.config import load_settings

        settings = load_settings()
        root = settings.home / "demo"
        if fresh and root.exists():
            shutil.rmtree(root)
        cluster = DemoCluster(root) if root.joinpath("cluster.json").exists() else DemoCluster.create(
            root, nodes=settings.pipeline.demo_nodes, seed=seed)
        console.print(f"[bold]Pitstop demo[/]: {len(cluster.nodes())}-node demo cluster at {root}, mode [bold]act[/] (demo cluster only)")
        if not os.environ.get("PREFECT_API_URL"):
            console.print("PREFECT_API_URL is not set: starting Prefect's temporary local server (about 15 s)...")
        started = time.monotonic()
        from flows.post_failure import post_failure

        table = Table(title="What Pitstop found and did")
        for column in ("job", "cause", "signature", "actions"):
            table.add_column(column)
        stories: list[tuple[str, list[str]]] = []
        for index in range(faults):
            # One fault at a time, as on a real cluster: each job's kernel log is its own past.
            showcase = [SHOWCASE[index]] if index < len(SHOWCASE) else None
            injected = cluster.inject_faults(1, kinds=showcase)
            if not injected:
                console.print("no healthy nodes left for more faults")
                break
            f = injected[0]
            console.print(f"  injected {f.fault:<24} job {f.job_id} on {', '.join(f.nodes)}")
            try:
                report = post_failure(f.job_id, cluster="demo")
            except Exception as exc:  # show the rest of the demo even if one run fails
                table.add_row(f.job_id, "[red]flow failed[/]", "", str(exc)[:200])
                continue
            cause = report.verdict.cause.value if report.verdict else "-"
            sig = report.verdict.signature if report.verdict else "-"
            acts = "\n".join(f"{a.kind} {a.target}: {_WORDS.get(a.state, a.state)}" for a in report.actions) or "none"
            stories.append((f.job_id, [_story_line(line) for line in report.explain
                                       if any(mark in line for mark in _OUTCOME_MARKS)]))
            table.add_row(f.job_id, cause, sig, acts)
        console.print(table)
        console.print("[bold]Found among the job's nodes, and where each incident ended:[/]")
        for job_id, lines in stories:
            for line in lines or ["(no node was blamed)"]:
                console.print(f"  job {job_id}: {escape(line)}", soft_wrap=True)
        from pitstop.secrets import redact

        console.print(f"Done in {time.monotonic() - started:.1f} s. Database: {redact(settings.effective_database_url)}")
        console.print(f"Notifications: {settings.home / 'outbox'}  Cluster changes: {len(cluster.actions())} (see {root / 'cluster.json'})")
        console.print("Inspect with `pitstop incidents` and `pitstop nodes` (PITSTOP_HOME must match).")
