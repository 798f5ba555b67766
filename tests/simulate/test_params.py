"""The shipped Llama 3 parameters, and what the loader refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pitstop.simulate import load_params
from pitstop.simulate.params import DEFAULT_PARAMS_RESOURCE


def test_shipped_parameters_are_table_5(params) -> None:
    assert "Llama 3 Herd of Models" in params.source and "Table 5" in params.source
    assert sum(c.count for c in params.categories) == 419  # Table 5's unexpected interruptions
    assert all(c.source.startswith("Table 5:") for c in params.categories)
    counts = {c.name: c.count for c in params.categories}
    assert counts["faulty_gpu"] == 148 and counts["gpu_hbm3"] == 72 and counts["software_bug"] == 54
    assert (params.cluster.job_nodes * params.cluster.gpus_per_node, params.cluster.days) == (16384, 54)


def test_rates_scale_with_nodes_and_days(params) -> None:
    cluster = params.cluster.model_copy(update={"job_nodes": 1024, "days": 27})
    half = params.model_copy(update={"cluster": cluster})
    c = params.categories[0]
    assert half.expected_count(c) == pytest.approx(params.expected_count(c) / 4)


def test_bad_parameters_name_the_file(tmp_path: Path) -> None:
    from importlib import resources

    data = yaml.safe_load(resources.files("pitstop.simulate").joinpath(DEFAULT_PARAMS_RESOURCE).read_text())
    data["categories"][0]["need"] = {"reboot": 0.5, "replace": 0.4}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match=r"(?s)bad\.yaml.*sum to 1"):
        load_params(bad)
    with pytest.raises(ValueError, match="cannot read"):
        load_params(tmp_path / "missing.yaml")
