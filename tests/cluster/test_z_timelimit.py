"""The 1-minute time-limit job is submitted by the `timelimit_job` fixture when the first cluster
test runs; this file sorts last so its 60-90 s wait overlaps the other tests."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.cluster


def test_time_limit_reads_back_as_timeout(slurm_cluster, timelimit_job) -> None:
    slurm_cluster.wait_state(timelimit_job, "TIMEOUT", timeout_s=150)
    record = slurm_cluster.scheduler().job(timelimit_job)
    assert record.state == "TIMEOUT" and record.time_limit_min == 1
    assert record.signal == 15 and record.reason == "TimeLimit"
    assert (record.end_time - record.start_time).total_seconds() >= 60
