"""`pitstop label`, `pitstop classify --eval --labelled`, `pitstop rules suggest|check` end to end:
real subprocesses of the CLI against a real SQLite store, with the shipped corpora.

The job logs copy real formats: Apptainer/Singularity on a node that lacks the job owner's
account (apptainer/singularity#5757), srun's task exit line (Slurm srun(1)) and a Python
traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pitstop.config import load_settings
from pitstop.models import Cause, Evidence, Verdict
from pitstop.store import Store
from pitstop.store import records as r
from tests.cluster.conftest import dev_cluster_env, slurm_cluster  # noqa: F401  (session fixtures)


def pitstop(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITSTOP_")}
    env.update(PITSTOP_HOME=str(home), COLUMNS="200", USER="alice")
    return subprocess.run([sys.executable, "-m", "pitstop.cli.entry", *args], env=env, capture_output=True,
                          text=True, timeout=300)


def apptainer_log(uid: int, node: str) -> str:
    return (
        "+ srun singularity exec /shared/img/pytorch-24.03.sif python train.py\n"
        f"WARNING: Could not lookup the current user's information: user: unknown userid {uid}\n"
        f"FATAL:   Couldn't determine user account information: user: unknown userid {uid}\n"
        f"srun: error: {node}: task 0: Exited with exit code 255\n"
    )


BUG_LOG = ("Traceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n"
           "    main()\nValueError: expected a 4-d input, got 3\n"
           "srun: error: gpu002: task 0: Exited with exit code 1\n")


def seed(home: Path, logs: Path) -> list[int]:
    store = Store.from_settings(load_settings(home=home))
    ids = []
    for n, text in enumerate([apptainer_log(41021, "gpu017"), apptainer_log(50213, "gpu122"), BUG_LOG], start=1):
        (logs / f"slurm-{n}.out").write_text(text)
        last = text.splitlines()[-1]
        verdict = Verdict(cause=Cause.UNKNOWN, signature="no-match", confidence=0.1,
                          evidence=[Evidence(line=len(text.splitlines()), text=last)])
        inc, _ = r.create_job_incident(store, cluster="dev", job_id=str(n), verdict=verdict,
                                       end_time=datetime.now(timezone.utc) - timedelta(minutes=n))
        ids.append(inc.id)
    store.dispose()
    return ids


def test_label_eval_suggest_accept_end_to_end(isolated_home: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    first, second, third = seed(isolated_home, logs)

    out = pitstop(isolated_home, "label", str(first), "environment", "--note", "node lacks LDAP users: fix sssd",
                  "--log", str(logs / "slurm-1.out"))
    assert out.returncode == 0, out.stderr
    assert f"incident {first}: labelled environment by alice (Pitstop said unknown (no-match))" in out.stdout
    assert "kept 4 lines of" in out.stdout
    assert pitstop(isolated_home, "label", str(second), "environment", "--by", "bob",
                   "--log", str(logs / "slurm-2.out")).returncode == 0
    # First a wrong label, then the right one: both kept, the newest wins; the snapshot is kept too.
    assert pitstop(isolated_home, "label", str(third), "storage_io", "--log", str(logs / "slurm-3.out")).returncode == 0
    relabel = pitstop(isolated_home, "label", str(third), "software_bug", "--json")
    assert relabel.returncode == 0, relabel.stderr
    assert "ValueError: expected a 4-d input" in json.loads(relabel.stdout)["excerpt"]
    history = pitstop(isolated_home, "labels", str(third), "--json")
    assert [json.loads(line)["cause"] for line in history.stdout.splitlines()] == ["storage_io", "software_bug"]

    bad = pitstop(isolated_home, "label", "9999", "environment")
    assert bad.returncode == 1 and "no incident 9999" in bad.stderr
    bad = pitstop(isolated_home, "label", str(first), "gremlins")
    assert bad.returncode == 2 and "'gremlins' is not a cause" in bad.stderr and "gpu_hardware" in bad.stderr

    before = pitstop(isolated_home, "classify", "--eval", "--labelled", "--json")
    assert before.returncode == 0, before.stderr
    report = json.loads(before.stdout)
    assert report["total"] == 3
    wrong = {m["id"] for m in report["mistakes"]}
    assert {f"incident {first}", f"incident {second}"} <= wrong, \
        "the built-in rules now know this wording: pick another site-specific excerpt"
    human = pitstop(isolated_home, "classify", "--eval", "--labelled")
    assert "accuracy" in human.stdout and f"wrong: incident {first}: environment ->" in human.stdout

    suggested = pitstop(isolated_home, "rules", "suggest", "--json")
    assert suggested.returncode == 0, suggested.stderr
    proposal = json.loads(suggested.stdout)
    assert proposal["corpus_rows"] > 900  # the shipped corpora were re-scored too
    env = [s for s in proposal["suggestions"] if s["rule"]["cause"] == "environment"]
    assert len(env) == 1 and sorted(env[0]["fixes"]) == sorted([f"incident {first}", f"incident {second}"])
    assert env[0]["breaks"] == [] and env[0]["rule"]["hint"] == "node lacks LDAP users: fix sssd"
    assert "41021" not in env[0]["rule"]["pattern"]
    assert not (isolated_home / "site-rules.yaml").exists()  # suggesting changes nothing

    accepted = pitstop(isolated_home, "rules", "suggest", "--accept")
    assert accepted.returncode == 0, accepted.stderr
    assert f"appended {env[0]['rule']['name']}" in accepted.stdout
    check = pitstop(isolated_home, "rules", "check")
    assert check.returncode == 0 and "valid:" in check.stdout

    after = json.loads(pitstop(isolated_home, "classify", "--eval", "--labelled", "--json").stdout)
    assert not {f"incident {first}", f"incident {second}"} & {m["id"] for m in after["mistakes"]}
    assert after["accuracy"] > report["accuracy"]
    # The rule generalises to an unseen incident of the same kind (another uid, another node).
    (logs / "new.out").write_text(apptainer_log(60001, "gpu200"))
    verdict = json.loads(pitstop(isolated_home, "classify", str(logs / "new.out"), "--json").stdout)
    assert (verdict["cause"], verdict["signature"]) == ("environment", env[0]["rule"]["name"])
    again = pitstop(isolated_home, "rules", "suggest", "--json", "--corpus",
                    str(Path(__file__).parents[1] / "fixtures" / "classifiers" / "dev.jsonl"))
    assert not [s for s in json.loads(again.stdout)["suggestions"] if s["rule"]["cause"] == "environment"]

    # A broken site file: a clear error, and classification goes on with the built-in rules.
    site = isolated_home / "site-rules.yaml"
    site.write_text(site.read_text().replace("cause: environment", "cause: enviroment"))
    check = pitstop(isolated_home, "rules", "check")
    assert check.returncode == 1 and "site-rules.yaml:" in check.stdout and "enviroment" in check.stdout
    degraded = pitstop(isolated_home, "classify", str(logs / "new.out"), "--json")
    assert degraded.returncode == 0 and "built-in rules still apply" in degraded.stderr
    assert json.loads(degraded.stdout)["signature"] != env[0]["rule"]["name"]
    refused = pitstop(isolated_home, "rules", "suggest", "--accept")
    assert refused.returncode == 1 and "rules check" in refused.stderr


def test_label_help_names_every_cause() -> None:
    from pitstop.cli.cmd_label import LABEL_HELP

    assert all(c.value in LABEL_HELP for c in Cause)  # the help is text, written before Cause is imported


def test_label_snapshots_the_log_the_scheduler_names(isolated_home: Path, slurm_cluster) -> None:  # noqa: F811
    """Without --log, the real Slurm's record of the job gives its log path and end state."""
    slurm_cluster.jobs_dir.mkdir(parents=True, exist_ok=True)
    line = "FATAL:   Couldn't determine user account information: user: unknown userid 551"
    job = slurm_cluster.submit(f"--output={slurm_cluster.jobs_dir}/label-%j.out", "--wrap", f'echo "{line}"; exit 255')
    slurm_cluster.wait_state(job, "FAILED")
    store = Store.from_settings(load_settings(home=isolated_home))
    inc, _ = r.create_job_incident(store, cluster="default", job_id=job, end_time=None,
                                   verdict=Verdict(cause=Cause.UNKNOWN, signature="no-match", confidence=0.1))
    store.dispose()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITSTOP_")}
    env.update(slurm_cluster.env, PITSTOP_HOME=str(isolated_home), PITSTOP_CLUSTER="slurm",
               PITSTOP_SLURM__CONF_PATH=str(slurm_cluster.conf_path))
    out = subprocess.run([sys.executable, "-m", "pitstop.cli.entry", "label", str(inc.id), "environment", "--json"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert record["excerpt"] == line
    assert record["sources"][0]["path"] == f"{slurm_cluster.jobs_dir}/label-{job}.out"
    assert record["facts"]["state"] == "FAILED" and record["facts"]["exit_code"] == 255
