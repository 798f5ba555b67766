"""`pitstop simulate`: JSON, the PNG, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from pitstop.cli.app import build_app

SMALL = ["--days", "4", "--nodes", "256", "--spares", "8", "--no-progress"]


def test_json_has_every_strategy_and_the_figure_is_a_png(tmp_path: Path) -> None:
    png = tmp_path / "goodput.png"
    result = CliRunner().invoke(build_app(), ["simulate", *SMALL, "--json", "--png", str(png), "--seed", "5"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout.strip().splitlines()[0])
    assert [s["name"] for s in doc["strategies"]] == ["no_automation", "observe", "act", "bad_policy"]
    assert doc["job_nodes"] == 256 and doc["days"] == 4 and doc["seed"] == 5
    assert abs(doc["expected_interruptions"] - 419 * (256 / 2048) * (4 / 54)) < 1e-9
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_table_output_and_bad_input(tmp_path: Path) -> None:
    app = build_app()
    result = CliRunner().invoke(app, ["simulate", *SMALL, "--strategy", "act"])
    assert result.exit_code == 0, result.output
    assert "ETTR" in result.stdout and "act" in result.stdout
    assert CliRunner().invoke(app, ["simulate", *SMALL, "--strategy", "sometimes"]).exit_code == 2
    bad = tmp_path / "p.yaml"
    bad.write_text("rules: []\n")
    assert CliRunner().invoke(app, ["simulate", *SMALL, "--policy", str(bad)]).exit_code == 2
