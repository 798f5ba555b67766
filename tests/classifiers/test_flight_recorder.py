"""PyTorch NCCL flight-recorder dumps: real shape, lag detection, and hostile or broken files."""

from __future__ import annotations

import importlib.util
import os
import pickle
import random
from pathlib import Path

import pytest

from classifiers.flight_recorder import (
    MAX_DUMP_BYTES,
    FlightRecorderError,
    Progress,
    analyze_dumps,
    discover_flight_recorder_dumps,
    find_laggards,
    load_dump,
    rank_from_path,
    restricted_loads,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "suspects"


def _generator():
    spec = importlib.util.spec_from_file_location("make_flight_recorder", FIX / "make_flight_recorder.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dumps(name: str) -> list[Path]:
    return discover_flight_recorder_dumps([FIX / name])


def _write(folder: Path, dumps: dict[int, dict]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank, raw in dumps.items():
        path = folder / f"nccl_trace_rank_{rank}"
        path.write_bytes(pickle.dumps(raw, protocol=2))
        paths.append(path)
    return paths


# --- the committed fixtures ---------------------------------------------------------------------


def test_committed_fixtures_are_what_the_generator_writes(tmp_path: Path) -> None:
    _generator().main(tmp_path)
    for folder in ("fr_rank5_lags", "fr_all_stuck", "fr_json_rank2_lags"):
        fresh = sorted(p.name for p in (tmp_path / folder).iterdir())
        assert fresh == sorted(p.name for p in (FIX / folder).iterdir()), folder
        for name in fresh:
            assert (tmp_path / folder / name).read_bytes() == (FIX / folder / name).read_bytes(), name


def test_a_dump_in_torchs_shape_loads_as_plain_data() -> None:
    raw = load_dump(FIX / "fr_rank5_lags" / "nccl_trace_rank_0")
    assert raw["version"] == "2.10"
    assert raw["pg_config"]["0"] == {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"}
    first = raw["entries"][0]
    assert first["process_group"] == ("0", "default_pg") and first["state"] == "completed"
    assert {"record_id", "collective_seq_id", "p2p_seq_id", "profiling_name", "time_created_ns"} <= set(first)
    assert raw["pg_status"]["0"]["last_completed_collective"] == 41


def test_the_rank_that_never_entered_the_stuck_collective_is_named() -> None:
    analysis = analyze_dumps(_dumps("fr_rank5_lags"))
    assert analysis.ranks == list(range(8)) and analysis.world_size == 8
    assert [lag.rank for lag in analysis.laggards] == [5]
    lag = analysis.laggards[0]
    assert lag.collective == 42 and lag.state == "never entered collective 42"
    assert lag.ahead == [0, 1, 2, 3, 4, 6, 7]  # ranks 0, 3, 6 ran ahead to 43: still not laggards
    assert lag.source.endswith("nccl_trace_rank_5") and "rank 5 never entered" in lag.summary()


def test_every_rank_stuck_in_the_same_collective_names_nobody() -> None:
    analysis = analyze_dumps(_dumps("fr_all_stuck"))
    assert analysis.laggards == []
    assert any("all 8 ranks" in n and "no rank lags" in n for n in analysis.notes)


def test_the_json_form_reads_like_the_pickle() -> None:
    paths = _dumps("fr_json_rank2_lags")
    assert (FIX / "fr_json_rank2_lags" / "nccl_trace_rank_0").read_bytes()[:1] == b"{"
    analysis = analyze_dumps(paths)
    assert [lag.rank for lag in analysis.laggards] == [2] and analysis.laggards[0].collective == 7


def test_pg_status_alone_is_enough(tmp_path: Path) -> None:
    gen = _generator()
    dumps = gen.lagging_set(4, laggard=3, stuck=9)
    for raw in dumps.values():
        raw.pop("entries")  # e.g. includeCollectives=false
    analysis = analyze_dumps(_write(tmp_path, dumps))
    assert [lag.rank for lag in analysis.laggards] == [3] and analysis.laggards[0].basis == "pg_status"


def test_a_rank_whose_gpu_never_started_the_collective(tmp_path: Path) -> None:
    gen = _generator()
    dumps = gen.stuck_set(4, stuck=12)
    dumps[1] = gen.dump(gen.rank_entries(11, [], [12]), {"enqueued": 12, "started": 11, "completed": 11}, world=4)
    analysis = analyze_dumps(_write(tmp_path, dumps))
    assert [lag.rank for lag in analysis.laggards] == [1]
    assert "never started it" in analysis.laggards[0].state


def test_a_rank_stuck_in_another_group_is_the_culprit_not_its_victim(tmp_path: Path) -> None:
    gen = _generator()
    tp = ("1", "tp")

    def with_tp(raw: dict, entries: list[dict]) -> dict:
        raw["pg_config"]["1"] = {"name": "1", "desc": "tp", "ranks": "[1, 2]"}
        raw["entries"] += entries
        return raw

    dumps = {r: gen.dump(gen.rank_entries(41, [42]), {"enqueued": 42, "started": 42, "completed": 41}, world=4)
             for r in (0, 3)}
    # rank 1 waits in tp collective 7 for rank 2, whose GPU hung before it: neither reaches 42.
    at_41 = {"enqueued": 41, "started": 41, "completed": 41}
    dumps[1] = with_tp(gen.dump(gen.rank_entries(41), at_41, world=4),
                       [gen.entry(100 + s, s, "completed" if s < 7 else "started", pg=tp, pg_id=1)
                        for s in range(1, 8)])
    dumps[2] = with_tp(gen.dump(gen.rank_entries(41), at_41, world=4),
                       [gen.entry(100 + s, s, "completed", pg=tp, pg_id=1) for s in range(1, 7)])
    analysis = analyze_dumps(_write(tmp_path, dumps))
    assert [lag.rank for lag in analysis.laggards] == [2]
    assert analysis.laggards[0].group == "1 (tp)"


def test_missing_ranks_are_a_note(tmp_path: Path) -> None:
    gen = _generator()
    dumps = gen.lagging_set(4, laggard=1, stuck=5)
    dumps.pop(3)
    analysis = analyze_dumps(_write(tmp_path, dumps))
    assert any("no dump from ranks 3" in n for n in analysis.notes)


# --- comparing ranks ----------------------------------------------------------------------------


def test_ranks_running_ahead_are_not_compared_by_raw_counters() -> None:
    result = find_laggards({
        0: Progress(enqueued=44, completed=41),
        1: Progress(enqueued=42, completed=41),
        2: Progress(enqueued=43, completed=41),
        3: Progress(enqueued=41, completed=41),
    })
    assert [lag.rank for lag in result.laggards] == [3] and result.laggards[0].collective == 42
    assert result.ahead == [0, 1, 2]


def test_more_ranks_behind_than_ahead_names_nobody() -> None:
    result = find_laggards({r: Progress(enqueued=9 if r == 0 else 8, completed=8) for r in range(4)})
    assert result.laggards == [] and "more behind than ahead" in result.notes[0]


def test_a_single_rank_cannot_lag() -> None:
    assert find_laggards({0: Progress()}).laggards == []


# --- hostile and broken files -------------------------------------------------------------------


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _hostile(marker: Path) -> dict[str, bytes]:
    command = f"touch {marker}".encode()
    return {
        "protocol0_global": b"cos\nsystem\n(S'" + command + b"'\ntR.",
        "protocol4_stack_global": pickle.dumps(_Evil(marker), protocol=4),
        "inside_a_dump": pickle.dumps({"version": "2.10", "entries": [_Evil(marker)]}, protocol=2),
        "builtins_eval": b"cbuiltins\neval\n(S'__import__(\"os\").system(\"" + command + b"\")'\ntR.",
        "subprocess": b"csubprocess\nPopen\n((S'touch'\nS'" + str(marker).encode() + b"'\nltR.",
        "getattr": b"cbuiltins\ngetattr\n(cbuiltins\nobject\nS'__subclasses__'\ntR.",
    }


@pytest.mark.parametrize("case", list(_hostile(Path("/x"))))
def test_a_pickle_that_calls_anything_is_refused_and_never_runs(tmp_path: Path, case: str) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(_hostile(marker)[case])
    with pytest.raises(FlightRecorderError, match="refusing"):
        load_dump(path)
    analysis = analyze_dumps([path])
    assert analysis.laggards == [] and any("refusing" in n for n in analysis.notes)
    assert not marker.exists()


def test_torch_type_tags_are_read_as_plain_data() -> None:
    # what torch's Pickler writes with tag_aggregates on: restore_type_tag(dict, "Dict[str, int]")
    data = (b"\x80\x02ctorch.jit._pickle\nrestore_type_tag\n}X\x01\x00\x00\x00aK\x01s"
            b"X\x0e\x00\x00\x00Dict[str, int]\x86R.")
    assert restricted_loads(data) == {"a": 1}


def test_broken_dumps_are_notes_never_errors(tmp_path: Path) -> None:
    good = (FIX / "fr_rank5_lags" / "nccl_trace_rank_0").read_bytes()
    files = {
        "nccl_trace_rank_0": good[: len(good) // 2],  # truncated
        "nccl_trace_rank_1": b"",
        "nccl_trace_rank_2": random.Random(7).randbytes(4096),
        "nccl_trace_rank_3": pickle.dumps([1, 2, 3], protocol=2),  # not a dict
        "nccl_trace_rank_4": b'{"version": "2.10", "entries": [',  # cut JSON
        "nccl_trace_rank_5": b"\x80\x02}q\x00(X\x07\x00\x00\x00entriesq\x01]q\x02(\xff\xfe",
        "nccl_trace_rank_6": b"[" * 200_000 + b"]" * 200_000,  # deep JSON-ish junk
        "no_rank_here": good,
    }
    paths = []
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        paths.append(tmp_path / name)
    (tmp_path / "nccl_trace_rank_7").mkdir()
    paths += [tmp_path / "nccl_trace_rank_7", tmp_path / "nccl_trace_rank_8"]  # a folder, a missing file
    analysis = analyze_dumps(paths)
    assert analysis.laggards == [] and analysis.ranks == []
    assert len(analysis.notes) >= len(paths)
    for name in ("rank_0", "rank_1", "rank_7", "rank_8", "no_rank_here"):
        assert any(f"{name}:" in n for n in analysis.notes), name


def test_a_dump_over_the_size_limit_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "nccl_trace_rank_0"
    with open(path, "wb") as out:
        out.truncate(MAX_DUMP_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(FlightRecorderError, match="limit"):
        load_dump(path)


# --- finding the files --------------------------------------------------------------------------


def test_discover_finds_rank_files_sorted_by_rank(tmp_path: Path) -> None:
    (tmp_path / "gpu02").mkdir()
    for rank in (0, 3, 10):
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(b"x")
    (tmp_path / "gpu02" / "nccl_trace_rank_4").write_bytes(b"x")
    for other in ("nccl_trace_rank_", "nccl_trace_rank_1.json", "nccl_trace_rank_x", "slurm-1.out"):
        (tmp_path / other).write_bytes(b"x")
    found = discover_flight_recorder_dumps([tmp_path, tmp_path / "missing"])
    assert [rank_from_path(p) for p in found] == [0, 3, 4, 10]
    (tmp_path / "fr_7").write_bytes(b"x")
    assert [p.name for p in discover_flight_recorder_dumps([tmp_path], prefix="fr_")] == ["fr_7"]
