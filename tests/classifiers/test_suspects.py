"""Which node of a multi-node job is at fault: kernel logs, job logs, flight recorder, bad input."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from classifiers.suspects import (
    RankMap,
    ReadLimits,
    SuspectReport,
    discover_flight_recorder_dumps,
    find_suspects,
    matching_lines,
    parse_tasks_per_node,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "suspects"
REPO = Path(__file__).resolve().parents[2]
TWO = ["gpu01", "gpu02"]
FOUR = ["gpu01", "gpu02", "gpu03", "gpu04"]
# The example, verbatim.
NCCL_IB = (b"gpu01:71357:71357 [9] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
           b"10.0.0.2<46186> with error 12, opcode 0, len 0, vendor err 129 (Recv)\n")
LINK_DOWN = b"2026-03-02T10:14:58+0000 gpu01 kernel: mlx5_core 0000:17:00.0: Port 1 link down\n"


def _file(tmp_path: Path, name: str, data: bytes | str) -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def _names(report: SuspectReport) -> list[str]:
    return [s.node for s in report.suspects]


# --- the fabric example -------------------------------------------------------------------------


def test_nccl_ib_error_plus_link_down_in_its_kernel_log_is_hardware(tmp_path: Path) -> None:
    log = _file(tmp_path, "slurm-1.out", NCCL_IB)
    kernel = _file(tmp_path, "gpu01.dmesg", LINK_DOWN)
    report = find_suspects(TWO, log_paths=[log], kernel_logs={"gpu01": kernel})
    assert _names(report) == ["gpu01"]
    suspect = report.suspects[0]
    assert suspect.hardware is True and report.hardware_nodes == ["gpu01"]
    assert any("link down" in r for r in suspect.reasons) and any("NCCL" in r for r in suspect.reasons)
    assert {(e.source, e.line) for e in suspect.evidence} == {(str(kernel), 1), (str(log), 1)}


def test_the_nccl_line_alone_names_the_node_but_not_its_hardware(tmp_path: Path) -> None:
    report = find_suspects(TWO, log_paths=[_file(tmp_path, "slurm-1.out", NCCL_IB)])
    assert _names(report) == ["gpu01"] and report.suspects[0].hardware is False
    assert report.hardware_nodes == []


def test_fabric_fixture_with_both_kernel_logs() -> None:
    kernels = {"gpu01": FIX / "kernel_gpu01_linkdown.txt", "gpu02": FIX / "kernel_gpu02_clean.txt"}
    report = find_suspects(TWO, log_paths=[FIX / "fabric_gpu01.log"], kernel_logs=kernels, tasks_per_node="4(x2)")
    assert _names(report) == ["gpu01"] and report.suspects[0].hardware
    # every task exited 1 and 7 ranks timed out alike: that names neither node
    assert any("task_failed" in n and "names none" in n for n in report.notes)
    assert not any("Xid 63" in r for r in report.suspects[0].reasons)  # IGNORE bucket: not evidence
    without = find_suspects(TWO, log_paths=[FIX / "fabric_gpu01.log"], tasks_per_node="4(x2)")
    assert _names(without) == ["gpu01"] and not without.suspects[0].hardware


# --- flight recorder and watchdog lag -----------------------------------------------------------


@pytest.mark.parametrize("tasks", [None, "4(x2)", "4,4"])
def test_rank5_lagging_in_the_flight_recorder_names_the_second_node(tasks: str | None) -> None:
    dumps = discover_flight_recorder_dumps([FIX / "fr_rank5_lags"])
    report = find_suspects(TWO, flight_recorder=dumps, tasks_per_node=tasks)
    assert _names(report) == ["gpu02"]
    suspect = report.suspects[0]
    assert suspect.ranks == [5] and suspect.hardware is False
    assert "flight recorder" in suspect.reasons[0] and "never entered collective 42" in suspect.reasons[0]
    assert suspect.evidence[0].source.endswith("nccl_trace_rank_5")
    assert any("spread evenly" in n for n in report.notes) == (tasks is None)


def test_everyone_timed_out_names_nobody() -> None:
    report = find_suspects(TWO, log_paths=[FIX / "all_timeout.log"])
    assert report.suspects == []
    assert any("all 8 ranks" in n and "no rank lags" in n for n in report.notes)
    stuck = find_suspects(TWO, flight_recorder=discover_flight_recorder_dumps([FIX / "fr_all_stuck"]),
                          log_paths=[FIX / "all_timeout.log"])
    assert stuck.suspects == []


def test_the_rank_that_did_not_time_out_lags_in_the_log() -> None:
    report = find_suspects(TWO, log_paths=[FIX / "rank5_lag.log"], tasks_per_node="4(x2)")
    assert _names(report) == ["gpu02"] and report.suspects[0].ranks == [5]
    assert "NCCL watchdog" in report.suspects[0].reasons[0]
    assert "Last enqueued NCCL work: 41" in report.suspects[0].evidence[0].text


def test_log_and_flight_recorder_agree_on_one_suspect() -> None:
    report = find_suspects(TWO, log_paths=[FIX / "rank5_lag.log"],
                           flight_recorder=discover_flight_recorder_dumps([FIX / "fr_rank5_lags"]))
    assert _names(report) == ["gpu02"] and len(report.suspects[0].reasons) == 2


# --- ranks to nodes -----------------------------------------------------------------------------


def test_tasks_per_node_syntax() -> None:
    assert parse_tasks_per_node("8(x4)") == [8, 8, 8, 8]
    assert parse_tasks_per_node("2,1") == [2, 1]
    assert parse_tasks_per_node("2(x2),1") == [2, 2, 1]
    for bad in ("", "8x4", "2,,1", "a(x2)", "4(x99999999)"):
        with pytest.raises(ValueError):
            parse_tasks_per_node(bad)


def test_rank_map_block_distribution() -> None:
    m = RankMap.build(FOUR, "8(x4)", None, [])
    assert [m.node_of(r) for r in (0, 7, 8, 9, 31)] == ["gpu01", "gpu01", "gpu02", "gpu02", "gpu04"]
    assert m.node_of(32) is None and m.global_rank("gpu03", 5) == 21 and m.global_rank("gpu03", 8) is None
    m = RankMap.build(TWO, "2,1", None, [])
    assert [m.node_of(r) for r in range(3)] == ["gpu01", "gpu01", "gpu02"] and m.node_of(3) is None
    notes: list[str] = []
    m = RankMap.build(["a", "b", "c"], None, 10, notes)
    assert m.counts == [4, 3, 3] and m.guessed and notes


def test_ranks_are_placed_through_tasks_per_node(tmp_path: Path) -> None:
    log = _file(tmp_path, "out", "[rank9]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
    report = find_suspects(FOUR, log_paths=[log], tasks_per_node="8(x4)")
    assert _names(report) == ["gpu02"] and report.suspects[0].ranks == [9]
    log = _file(tmp_path, "out2", "[rank2]: RuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert _names(find_suspects(TWO, log_paths=[log], tasks_per_node="2,1")) == ["gpu02"]


def test_bad_tasks_per_node_falls_back_to_an_even_spread(tmp_path: Path) -> None:
    log = _file(tmp_path, "out", "[rank3]: RuntimeError: CUDA error: unspecified launch failure\n"
                                 "[rank0]: step 10\n")
    report = find_suspects(TWO, log_paths=[log], tasks_per_node="8x2")
    assert any("cannot read tasks per node" in n for n in report.notes)
    assert _names(report) == ["gpu02"]  # 4 ranks seen -> 2 per node


def test_torchrun_local_rank_counts_only_with_a_host() -> None:
    report = find_suspects(TWO, log_paths=[FIX / "torchrun_ib_event.log"], tasks_per_node="4(x2)")
    assert _names(report) == ["gpu02"] and report.suspects[0].ranks == [7]  # local 3 on the 2nd node
    assert "InfiniBand port event" in report.suspects[0].reasons[0]


def test_a_local_rank_alone_is_not_a_global_rank(tmp_path: Path) -> None:
    log = _file(tmp_path, "out", "[default3]: RuntimeError: CUDA error: an illegal memory access was encountered\n")
    report = find_suspects(TWO, log_paths=[log], tasks_per_node="4(x2)")
    assert report.suspects == [] and any("named no host or rank" in n for n in report.notes)


# --- Slurm lines, hosts and the kernel catalog ---------------------------------------------------


def test_node_failure_is_hardware_and_killed_tasks_are_not_evidence() -> None:
    report = find_suspects(TWO, log_paths=[FIX / "node_failure.log"])
    assert _names(report) == ["gpu02"] and report.suspects[0].hardware


def test_one_failing_task_among_many_nodes_is_named(tmp_path: Path) -> None:
    log = _file(tmp_path, "out", "srun: error: gpu03: task 9: Exited with exit code 1\n"
                                 "srun: error: gpu01: tasks 0-3: Killed\n"
                                 "srun: error: gpu02: tasks 4-7: Terminated\n")
    report = find_suspects(FOUR, log_paths=[log], tasks_per_node="4(x4)")
    assert _names(report) == ["gpu03"] and report.suspects[0].ranks == [9]
    assert not report.suspects[0].hardware


def test_unknown_hosts_are_ignored_with_a_note(tmp_path: Path) -> None:
    log = _file(tmp_path, "out", NCCL_IB.replace(b"gpu01:", b"login7:"))
    kernel = _file(tmp_path, "k", LINK_DOWN)
    report = find_suspects(TWO, log_paths=[log], kernel_logs={"gpu99": kernel})
    assert report.suspects == []
    assert any("login7" in n and "not one of the job's nodes" in n for n in report.notes)
    assert any("gpu99" in n for n in report.notes)


def test_the_node_list_may_be_a_hostlist(tmp_path: Path) -> None:
    log = _file(tmp_path, "out", NCCL_IB.replace(b"gpu01:", b"gpu03:"))
    assert _names(find_suspects("gpu[01-04]", log_paths=[log])) == ["gpu03"]
    assert any("node list" in n for n in find_suspects("gpu[01-", log_paths=[log]).notes)


def test_host_names_match_by_short_name_and_case(tmp_path: Path) -> None:
    log = _file(tmp_path, "out", NCCL_IB.replace(b"gpu01:", b"GPU02.cluster.local:"))
    assert _names(find_suspects(TWO, log_paths=[log])) == ["gpu02"]


def test_prefixes_in_front_of_the_nccl_host_are_peeled(tmp_path: Path) -> None:
    lines = [b"[2026-03-02 10:15:02] " + NCCL_IB,  # NCCL's timestamp prefix (NCCL_DEBUG_TIMESTAMP_FORMAT)
             b"2026-03-02T10:15:02.123Z E| 3: " + NCCL_IB,  # pitstop run's combined.log, srun --label
             b"(RayWorker pid=4242, ip=10.0.0.1) " + NCCL_IB]
    for i, line in enumerate(lines):
        report = find_suspects(TWO, log_paths=[_file(tmp_path, f"out{i}", line)])
        assert _names(report) == ["gpu01"], line


def test_xids_count_by_the_catalog() -> None:
    xid31 = find_suspects(TWO, kernel_logs={"gpu01": FIX / "kernel_gpu01_xid31.txt"}).suspects
    assert [s.node for s in xid31] == ["gpu01"]
    assert not xid31[0].hardware and "implicates app" in xid31[0].reasons[0]
    both = find_suspects(TWO, kernel_logs={"gpu01": FIX / "kernel_gpu01_xid31.txt",
                                           "gpu02": FIX / "kernel_gpu02_xid79.txt"})
    assert _names(both) == ["gpu02"]  # an app fault next to a GPU that fell off the bus: its echo
    assert both.suspects[0].hardware and "Xid 79" in both.suspects[0].reasons[0]
    clean = find_suspects(TWO, kernel_logs={"gpu02": FIX / "kernel_gpu02_clean.txt"})  # Xid 45, EDAC CE
    assert clean.suspects == []


def test_uncorrectable_machine_checks_and_pcie_errors_are_hardware(tmp_path: Path) -> None:
    kernel = _file(tmp_path, "k",
                   "[ 912.1] mce: [Hardware Error]: CPU 3: Machine Check Exception: 5 Bank 7: be00000000800400\n"
                   "[ 913.4] EDAC MC1: 1 UE memory read error on CPU_SrcID#1_Ha#0_Chan#2_DIMM#0\n"
                   "[ 914.0] pcieport 0000:16:02.0: AER: Uncorrected (Fatal) error received: 0000:17:00.0\n")
    report = find_suspects(TWO, kernel_logs={"gpu02": kernel})
    assert _names(report) == ["gpu02"] and report.suspects[0].hardware
    assert len(report.suspects[0].evidence) == 3


def test_hardware_suspects_come_first(tmp_path: Path) -> None:
    kernel = _file(tmp_path, "k", LINK_DOWN)
    report = find_suspects(TWO, kernel_logs={"gpu01": kernel}, log_paths=[FIX / "rank5_lag.log"],
                           flight_recorder=discover_flight_recorder_dumps([FIX / "fr_rank5_lags"]))
    assert _names(report) == ["gpu01", "gpu02"]
    assert [s.hardware for s in report.suspects] == [True, False]


def test_peers_of_a_node_with_hardware_evidence_are_not_named(tmp_path: Path) -> None:
    log = _file(tmp_path, "out", NCCL_IB + b"srun: error: gpu01: tasks 0-3: Exited with exit code 1\n")
    report = find_suspects(TWO, log_paths=[log], kernel_logs={"gpu02": FIX / "kernel_gpu02_xid79.txt"})
    assert _names(report) == ["gpu02"] and report.suspects[0].hardware
    assert any("errors on gpu01 not counted" in n for n in report.notes)


def test_the_same_error_on_every_node_names_none(tmp_path: Path) -> None:
    lines = b"".join(NCCL_IB.replace(b"gpu01:", f"{n}:".encode()) for n in FOUR[:3])
    report = find_suspects(FOUR, log_paths=[_file(tmp_path, "out", lines)])
    assert report.suspects == [] and any("3 of 4 nodes" in n for n in report.notes)


# --- bad input ----------------------------------------------------------------------------------


def test_non_utf8_nul_and_binary_around_the_evidence(tmp_path: Path) -> None:
    junk = random.Random(3).randbytes(200_000)
    log = _file(tmp_path, "out", junk + b"\n\xff\xfe\x00" + NCCL_IB.rstrip(b"\n") + b" \xc3\x28\x00\n" + junk)
    report = find_suspects(TWO, log_paths=[log])
    assert "gpu01" in _names(report)
    text = next(e.text for e in report.suspects[_names(report).index("gpu01")].evidence)
    assert "\x00" not in text and "Got completion from peer" in text


def test_empty_missing_and_directory_inputs(tmp_path: Path) -> None:
    empty = _file(tmp_path, "empty", b"")
    report = find_suspects(TWO, log_paths=[empty, tmp_path / "missing", tmp_path],
                           kernel_logs={"gpu01": tmp_path / "nope"},
                           flight_recorder=[tmp_path / "nccl_trace_rank_0"])
    assert report.suspects == []
    assert sum("no such file" in n for n in report.notes) >= 3 and any("directory" in n for n in report.notes)
    assert find_suspects([], log_paths=[empty]).notes


def test_a_pipe_is_skipped_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "nccl_trace_rank_0"
    os.mkfifo(fifo)
    report = find_suspects(TWO, log_paths=[fifo], kernel_logs={"gpu01": fifo}, flight_recorder=[fifo])
    assert report.suspects == [] and sum("not a regular file" in n for n in report.notes) == 3


def test_a_huge_log_is_read_at_both_ends_only(tmp_path: Path) -> None:
    limits = ReadLimits(head_bytes=1 << 20, tail_bytes=256 << 10, chunk_bytes=64 << 10)
    filler = b"step 1 | loss 2.0 | lr 3e-4\n" * 80_000  # ~2.2 MiB
    middle = NCCL_IB.replace(b"gpu01:", b"gpu02:")  # past the head, before the tail: never read
    log = _file(tmp_path, "big", filler[: len(filler) // 2] + middle + filler[len(filler) // 2:] + NCCL_IB)
    report = find_suspects(TWO, log_paths=[log], limits=limits)
    assert _names(report) == ["gpu01"] and report.suspects[0].evidence[0].line == 0  # tail: line unknown
    assert any("read its first" in n for n in report.notes)


def test_a_line_with_no_end_is_cut_not_held(tmp_path: Path) -> None:
    limits = ReadLimits(chunk_bytes=256 << 10, carry_bytes=512 << 10, line_bytes=4096)
    log = _file(tmp_path, "one-line", b"\r" * (3 << 20) + NCCL_IB.rstrip(b"\n") + b"x" * (2 << 20))
    report = find_suspects(TWO, log_paths=[log], limits=limits)
    assert report.suspects and len(report.suspects[0].evidence[0].text) <= 500


def test_line_numbers_survive_chunk_boundaries(tmp_path: Path) -> None:
    lines = [f"line {i}\n".encode() for i in range(5000)]
    lines[1234] = NCCL_IB
    lines[4321] = NCCL_IB
    path = _file(tmp_path, "out", b"".join(lines))
    found = list(matching_lines(path, re.compile(rb"NCCL WARN"), ReadLimits(chunk_bytes=4096)))
    assert [n for n, _ in found] == [1235, 4322]


def test_matching_lines_are_capped(tmp_path: Path) -> None:
    path = _file(tmp_path, "out", NCCL_IB * 100)
    notes: list[str] = []
    found = list(matching_lines(path, re.compile(rb"NCCL WARN"), ReadLimits(max_lines=10), notes))
    assert len(found) == 10 and any("matching lines" in n for n in notes)


def test_the_module_is_pure() -> None:
    heavy = ("prefect", "tasks", "flows", "paramiko", "requests", "httpx")
    code = f"import sys, classifiers.suspects; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
