"""Parsers against output recorded from this project's dev cluster (Slurm 22.05.8), and against
truncated, empty and garbage variants of it: a typed SlurmParseError, never another exception."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pitstop.cluster.base import ClusterError, InvalidJobChanges, JobChanges
from pitstop.cluster.slurm import build_resubmit_argv
from pitstop.cluster.slurm_parse import (
    SlurmParseError,
    exit_from_wait_status,
    parse_sacct,
    parse_scontrol_jobs,
    parse_scontrol_nodes,
    parse_scontrol_records,
    parse_sinfo_json,
    parse_squeue_json,
    parse_time_limit,
    split_exit_code,
    split_node_state,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


# ------------------------------------------------------------------------------ recorded output


def test_sinfo_json_nodes_and_drain_reason() -> None:
    nodes = {n.name: n for n in parse_sinfo_json(read("sinfo.json"))}
    assert sorted(nodes) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    drained = nodes["gpu03"]
    assert (drained.state, drained.flags, drained.is_drained) == ("IDLE", ["DRAIN"], True)
    assert drained.reason == "xid 79 on GPU 3" and drained.reason_user == "root"
    assert drained.reason_time is not None and drained.reason_time.tzinfo is not None
    assert nodes["gpu04"].state == "MIXED" and not nodes["gpu04"].is_drained
    assert nodes["gpu01"].gres == "gpu:h100:8" and nodes["gpu01"].partitions == ["gpu"]
    assert nodes["gpu01"].cpus == 8


def test_squeue_json_exit_codes_are_wait_statuses() -> None:
    jobs = {j.job_id: j for j in parse_squeue_json(read("squeue.json"))}
    assert (jobs["1"].state, jobs["1"].exit_code, jobs["1"].signal) == ("COMPLETED", 0, None)
    assert (jobs["2"].state, jobs["2"].exit_code) == ("FAILED", 3)  # recorded raw: 768
    assert jobs["2"].nodes == ["gpu01", "gpu02"]
    assert (jobs["3"].exit_code, jobs["3"].signal) == (None, 9)  # kill -9 $$: raw 9
    assert jobs["4"].restart_count == 1 and jobs["4"].excluded_nodes == ["gpu01"]
    assert jobs["4"].time_limit_min == 10
    assert jobs["5"].reason == "JobHeldUser" and jobs["5"].start_time is None
    assert jobs["6"].command == "/tmp/pitstop-devcluster/jobs/train.sh"
    raw = json.loads(read("squeue.json"))["jobs"]
    assert {j["job_id"]: j["exit_code"] for j in raw}[2] == 768  # the fixture is what we think


def test_scontrol_show_node_keeps_reason_with_spaces() -> None:
    nodes = {n.name: n for n in parse_scontrol_nodes(read("scontrol_show_node.txt"))}
    gpu03 = nodes["gpu03"]
    assert gpu03.state == "IDLE" and gpu03.flags == ["DRAIN"]
    assert gpu03.reason == "xid 79 on GPU 3" and gpu03.reason_user == "root"
    assert gpu03.reason_time is not None
    assert nodes["gpu01"].reason is None and nodes["gpu01"].cpus == 8


def test_scontrol_show_job_full_record() -> None:
    jobs = {j.job_id: j for j in parse_scontrol_jobs(read("scontrol_show_job.txt"))}
    failed = jobs["2"]
    assert (failed.state, failed.exit_code, failed.signal) == ("FAILED", 3, None)
    assert failed.stdout_path == "/tmp/pitstop-devcluster/jobs/f-2.out"
    assert failed.reason == "NonZeroExitCode" and failed.user == "root"
    assert failed.start_time is not None and failed.end_time >= failed.start_time
    timeout = jobs["6"]
    assert (timeout.state, timeout.signal, timeout.time_limit_min) == ("TIMEOUT", 15, 1)
    assert timeout.command == "/tmp/pitstop-devcluster/jobs/train.sh"
    assert jobs["4"].restart_count == 1 and jobs["4"].excluded_nodes == ["gpu01"]
    assert (jobs["5"].state, jobs["5"].reason) == ("PENDING", "JobHeldUser")


def test_sacct_parsable_with_submit_line() -> None:
    jobs = {j.job_id: j for j in parse_sacct(read("sacct_P.txt"))}
    assert (jobs["2"].state, jobs["2"].exit_code) == ("FAILED", 3)
    assert jobs["2"].submit_line.endswith("--wrap exit 3")
    assert (jobs["3"].exit_code, jobs["3"].signal) == (None, 9)
    assert jobs["4"].end_time is None and jobs["4"].time_limit_min == 10
    assert jobs["6"].state == "TIMEOUT" and jobs["1"].time_limit_min is None


def test_sacct_submit_line_may_contain_the_delimiter() -> None:
    line = ("7|x|root|gpu|CANCELLED by 0|0:15|gpu01|2026-12-02T15:28:23|2026-12-02T15:28:24|"
            "2026-12-02T15:28:30|5|/tmp|None|sbatch --wrap echo a|b\n"
            "7.batch|batch||||0:15|gpu01|||||||\n")
    [job] = parse_sacct(line)
    assert job.state == "CANCELLED" and job.signal == 15 and job.submit_line == "sbatch --wrap echo a|b"


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("name", ["sinfo.json", "squeue.json"])
def test_every_truncation_of_json_is_a_typed_error(name: str) -> None:
    text = read(name)
    parse = parse_sinfo_json if name.startswith("sinfo") else parse_squeue_json
    for cut in list(range(0, 200, 7)) + list(range(200, len(text) - 1, max(1, len(text) // 150))):
        with pytest.raises(SlurmParseError):
            parse(text[:cut])


@pytest.mark.parametrize(
    "parse", [parse_sinfo_json, parse_squeue_json, parse_scontrol_jobs, parse_sacct]
)
def test_garbage_bytes_are_a_typed_error(parse) -> None:
    data = (FIXTURES / "garbage.bin").read_bytes()
    with pytest.raises(SlurmParseError):
        parse(data)


def test_truncated_fixture_files() -> None:
    with pytest.raises(SlurmParseError, match="invalid JSON"):
        parse_sinfo_json(read("sinfo_truncated.json"))
    with pytest.raises(SlurmParseError, match="fields"):
        parse_sacct(read("sacct_P_truncated.txt"))
    # a cut scontrol line is still Key=Value text: whatever parses must be a typed record
    for cut in range(0, len(read("scontrol_show_job.txt")), 37):
        try:
            parse_scontrol_jobs(read("scontrol_show_job.txt")[:cut])
        except SlurmParseError:
            pass


def test_json_reporting_errors_is_an_error() -> None:
    with pytest.raises(SlurmParseError, match="Unable to contact slurm controller"):
        parse_squeue_json(read("squeue_with_errors.json"))


@pytest.mark.parametrize(
    "text", ["", "   \n", "null", "[]", '{"nodes": 3}', '{"nodes": [1, 2]}', '{"nodes": [{}]}',
             '{"nodes": [{"name": "x", "state": 7}]}', '{"nodes": [{"name": "x", "state": []}]}',
             '{"nodes": [{"name": "x", "state": "idle", "cpus": "many"}]}']
)
def test_wrong_shaped_sinfo_is_a_typed_error(text: str) -> None:
    with pytest.raises(SlurmParseError):
        parse_sinfo_json(text)


@pytest.mark.parametrize(
    "text", ['{"jobs": [{"job_id": 1}]}', '{"jobs": [{"job_id": 1, "job_state": "FAILED", "exit_code": -5}]}',
             '{"jobs": [{"job_id": 1, "job_state": "RUNNING", "nodes": "gpu[1-"}]}']
)
def test_wrong_shaped_squeue_is_a_typed_error(text: str) -> None:
    with pytest.raises(SlurmParseError):
        parse_squeue_json(text)


@pytest.mark.parametrize("text", ["hello world", "=x", "JobState=FAILED", "NodeName=gpu01"])
def test_scontrol_without_required_keys_is_a_typed_error(text: str) -> None:
    with pytest.raises(SlurmParseError):
        parse_scontrol_jobs(text) if "Job" in text or text.startswith("h") else parse_scontrol_nodes(text)


def test_scontrol_empty_output_is_no_records() -> None:
    assert parse_scontrol_jobs("") == [] and parse_scontrol_records("\n\n") == []


def test_parse_errors_are_cluster_errors() -> None:
    assert issubclass(SlurmParseError, ClusterError)


# ------------------------------------------------------------------------------ small conversions


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(0, (0, None)), (768, (3, None)), (256, (1, None)), (9, (None, 9)), (15, (None, 15)),
     (134, (None, 6)), (None, (None, None)),
     ({"return_code": 3, "signal": {"id": 0}}, (3, None)),
     ({"set": True, "infinite": False, "number": 512}, (2, None))],
)
def test_exit_from_wait_status(raw, expected) -> None:
    assert exit_from_wait_status(raw) == expected


@pytest.mark.parametrize("raw", [-1, 70000, "x", [1]])
def test_exit_from_wait_status_rejects_garbage(raw) -> None:
    with pytest.raises(SlurmParseError):
        exit_from_wait_status(raw)


@pytest.mark.parametrize(
    ("text", "expected"), [("3:0", (3, None)), ("0:9", (None, 9)), ("0:0", (0, None)), ("", (None, None))]
)
def test_split_exit_code(text, expected) -> None:
    assert split_exit_code(text) == expected


@pytest.mark.parametrize("text", ["3", "a:b", "3:0:1", "-1:0"])
def test_split_exit_code_rejects_garbage(text) -> None:
    with pytest.raises(SlurmParseError):
        split_exit_code(text)


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("UNLIMITED", None), ("00:10:00", 10), ("1-00:00:00", 1440), ("2-12", 3600), ("1-01:30", 1530),
     ("45", 45), ("5:30", 6), ("00:00:01", 1), ("Partition_Limit", None)],
)
def test_parse_time_limit(text, minutes) -> None:
    assert parse_time_limit(text) == minutes


@pytest.mark.parametrize("text", ["soon", "1:2:3:4", "1-", "-5"])
def test_parse_time_limit_rejects_garbage(text) -> None:
    with pytest.raises(SlurmParseError):
        parse_time_limit(text)


@pytest.mark.parametrize(
    ("state", "flags", "expected"),
    [("IDLE+DRAIN", None, ("IDLE", ["DRAIN"])),
     ("idle", ["DRAIN"], ("IDLE", ["DRAIN"])),
     (["IDLE", "DRAIN"], None, ("IDLE", ["DRAIN"])),  # Slurm 23.x+ JSON: a list
     (["MIXED", "DRAIN", "REBOOT_REQUESTED"], None, ("MIXED", ["DRAIN", "REBOOT_REQUESTED"])),
     ("DOWN*+DRAIN", None, ("DOWN", ["DRAIN", "NOT_RESPONDING"])),
     ("MIX@", None, ("MIXED", ["REBOOT_REQUESTED"])),
     ("DRAIN", None, ("DRAIN", []))],
)
def test_split_node_state(state, flags, expected) -> None:
    assert split_node_state(state, flags) == expected


def test_slurm_23_style_numbers_and_states() -> None:
    # Hand-written in the documented v0.0.39+ shape (numbers as {"set","infinite","number"},
    # state as a list); not recorded here, because this machine runs 22.05.
    doc = {"meta": {}, "errors": [], "jobs": [{
        "job_id": 9, "job_state": ["FAILED"], "exit_code": {"status": ["EXITED"], "return_code": 3},
        "time_limit": {"set": True, "infinite": False, "number": 60},
        "submit_time": {"set": True, "infinite": False, "number": 1796225303},
        "start_time": {"set": False, "infinite": False, "number": 0}, "nodes": "gpu[01-02]",
    }]}
    [job] = parse_squeue_json(json.dumps(doc))
    assert (job.state, job.exit_code, job.time_limit_min) == ("FAILED", 3, 60)
    assert job.submit_time == datetime.fromtimestamp(1796225303, tz=UTC) and job.start_time is None


# ------------------------------------------------------------------------------ resubmit argv


def test_resubmit_argv_rebuilds_the_job_and_applies_changes() -> None:
    [record] = [r for r in parse_scontrol_records(read("scontrol_show_job.txt")) if r["JobId"] == "4"]
    argv = build_resubmit_argv(
        record, JobChanges(exclude_nodes=["gpu03"], time_limit_min=20, env={"NCCL_IB_DISABLE": "1"}), "4"
    )
    assert "--exclude=gpu[01,03]" in argv  # kept the old exclusion, added the new one
    assert "--time=20" in argv and "--export=ALL,NCCL_IB_DISABLE=1" in argv
    assert "--output=/tmp/pitstop-devcluster/jobs/slurm-%j.out" in argv  # never the old log
    assert "--chdir=/tmp/pitstop-devcluster/jobs" in argv and "--job-name=run" in argv
    assert not any(a.startswith("--uid") for a in argv)  # the job is root's own


def test_resubmit_argv_keeps_time_limit_and_runs_as_the_owner() -> None:
    record = {"JobId": "12", "JobName": "train", "UserId": "alice(1000)", "GroupId": "ml(2000)",
              "TimeLimit": "01:00:00", "StdOut": "/data/train.log", "ExcNodeList": "(null)",
              "TresPerNode": "gres:gpu:8", "NumNodes": "2"}
    argv = build_resubmit_argv(record, JobChanges(), "12", as_root=True)
    assert "--time=01:00:00" in argv and "--uid=alice" in argv and "--gid=ml" in argv
    assert "--gres=gpu:8" in argv and "--nodes=2" in argv
    assert "--output=/data/train.log" in argv and "--open-mode=append" in argv
    assert not any(a.startswith("--exclude") for a in argv)


# sbatch --export splits on ',' and treats ' and " as quotes: `A=it's,B=2` sets A to "it's,B=2"
@pytest.mark.parametrize("env", [{"BAD NAME": "1"}, {"X": "a,b"}, {"X": "two\nlines"},
                                 {"X": "it's"}, {"X": 'say "hi"'}, {"X\n": "1"}])
def test_resubmit_argv_rejects_env_sbatch_cannot_carry(env) -> None:
    with pytest.raises(InvalidJobChanges, match="job changes refused: env"):
        build_resubmit_argv({"JobId": "1"}, JobChanges(env=env), "1")


def test_resubmit_argv_carries_env_and_the_tag() -> None:
    argv = build_resubmit_argv({"JobId": "1"}, JobChanges(env={"NCCL_DEBUG": "INFO", "A": "x=y z"}), "1",
                               comment="pitstop incident=3 resubmit-of=1")
    assert "--export=ALL,NCCL_DEBUG=INFO,A=x=y z" in argv
    assert "--comment=pitstop incident=3 resubmit-of=1" in argv


# `scontrol show topology` of the dev cluster (Slurm 22.05, topology/tree), recorded: the spine
# lists every node below it too, so only level 0 names the leaf a node is cabled to.
SCONTROL_TOPOLOGY = """\
SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=gpu[01-02]
SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=gpu[03-04]
SwitchName=spine Level=1 LinkSpeed=1 Nodes=gpu[01-04] Switches=leaf1,leaf2
"""


def test_scontrol_topology_keeps_the_leaves() -> None:
    from pitstop.cluster.slurm_parse import parse_scontrol_topology

    assert parse_scontrol_topology(SCONTROL_TOPOLOGY) == {"leaf1": ["gpu01", "gpu02"], "leaf2": ["gpu03", "gpu04"]}
    assert parse_scontrol_topology("") == {}  # topology/none prints nothing on stdout
    # without Level (older output): a switch of switches is not a leaf
    assert parse_scontrol_topology("SwitchName=s0 Nodes=n[1-2]\nSwitchName=top Switches=s0 Nodes=n[1-2]\n") == {
        "s0": ["n1", "n2"]}
    with pytest.raises(ClusterError, match="switch s9: cannot read its node list"):
        parse_scontrol_topology("SwitchName=s9 Level=0 Nodes=n[1-\n")
