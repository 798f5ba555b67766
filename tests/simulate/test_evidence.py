"""Each category's lines go through the real classifier, and the node they blame is where the
real suspects step (classifiers/suspects.py) places the evidence."""

from __future__ import annotations

from pathlib import Path

import pytest

from classifiers.suspects import find_suspects
from pitstop.models import Cause
from pitstop.simulate import compare, load_params, sample_for
from pitstop.simulate.params import Blame
from pitstop.simulate.strategies import strategies
from pitstop.policy.model import load_policy

NODES = [f"gpu{i:04d}" for i in range(1, 9)]  # the rendered lines name gpu0001


def test_every_category_has_a_verdict(params, classify) -> None:
    for c in params.categories:
        verdict = classify(sample_for(c))
        assert verdict.cause is not Cause.UNKNOWN, c.name
    assert classify(sample_for(params.categories[0])).signature == "xid-79"


@pytest.mark.parametrize("name", [c.name for c in load_params().categories])
def test_blame_matches_where_suspects_places_the_evidence(name: str, params, tmp_path: Path) -> None:
    c = next(c for c in params.categories if c.name == name)
    sample = sample_for(c)
    log = tmp_path / "job.log"
    log.write_text(sample.log + "\n")
    kernel = {}
    if sample.kernel:
        (tmp_path / "kern.log").write_text(sample.kernel + "\n")
        kernel = {"gpu0001": tmp_path / "kern.log"}
    report = find_suspects(NODES, log_paths=[log], kernel_logs=kernel, tasks_per_node="8(x8)")
    if c.node_down:  # Slurm itself names the node it lost
        assert sample.job_state == "NODE_FAIL" and c.blame is Blame.HARDWARE
    elif c.blame is Blame.HARDWARE:
        assert report.hardware_nodes == ["gpu0001"]
    else:
        assert report.hardware_nodes == []
        assert bool(report.suspects) == (c.blame is Blame.SUSPECT)


def test_the_classifier_runs_once_per_category(params) -> None:
    calls = []
    from pitstop.cli.cmd_simulate import make_classifier

    real = make_classifier()

    def counting(sample):
        calls.append(sample)
        return real(sample)

    short = params.model_copy(update={"cluster": params.cluster.model_copy(update={"days": 5})})
    compare(short, load_policy(), counting, seed=3, strategies=strategies(["act"]))
    assert len(calls) == len(params.categories)
