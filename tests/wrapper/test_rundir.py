"""metadata.json is written without the json module; it must still be exactly what json reads."""

from __future__ import annotations

import json
import os

from pitstop.wrapper import rundir


def test_metadata_json_round_trips_odd_values() -> None:
    odd_arg = os.fsdecode(b"caf\xc3\xa9 \xff\xfe")  # non-UTF-8 argv arrives as surrogate escapes
    obj = {
        "command": ["python", "-c", 'print("a\\tb")\n\x00\x1b[31m', odd_arg, "日本語"],
        "n": -12, "big": 2**70, "f": 1.5e-7, "nan": float("nan"), "t": True, "f2": False,
        "none": None, "nested": {"k": [1, {"x": "y"}]}, "tuple": (1, 2),
    }
    text = rundir.to_json(obj)
    assert text.isascii()
    back = json.loads(text)
    expected = json.loads(json.dumps({**obj, "nan": None}))
    assert back == expected
    assert back["command"][3] == odd_arg


def test_create_run_writes_metadata_before_returning(tmp_path) -> None:
    runs = tmp_path / "home" / "runs"  # neither exists yet
    run_id, path, meta = rundir.create_run(str(runs), 1_800_000_000.0, lambda rid: {"id": rid, "x": 1})
    assert os.path.dirname(path) == str(runs)
    assert json.loads(open(os.path.join(path, "metadata.json")).read()) == {"id": run_id, "x": 1} == meta
