"""A new PITSTOP_HOME opened by many processes at once: every one gets a usable store.

Before the schema lock, 20 concurrent `pitstop run` on a fresh home failed with
`UNIQUE constraint failed: pitstop_schema_version.id`, `table actions already exists`, and
lost run rows. `pitstop run` opens the store at a moment that varies from run to run, so the
race is forced here: 20 processes open it at the same instant (without the lock, most fail).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlmodel import select

from pitstop.store import Store
from pitstop.store.tables import Run

# Each child waits for the same wall-clock moment, so they really open the store together.
OPENER = """
import sys, time
start = float(sys.argv[2])
from pitstop.store import Store
from pitstop.store.tables import Run
while time.time() < start:
    time.sleep(0.002)
store = Store(sys.argv[1])
with store.session() as s:
    s.add(Run(id="r" + sys.argv[3], command=["x"], cwd="/", host="h", user="u", run_dir="/"))
    s.commit()
"""


@pytest.mark.slow
def test_twenty_processes_create_one_fresh_store_together(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/fresh/pitstop.db"
    start = time.time() + 5  # enough for 20 interpreters to import sqlmodel on 2 cores
    procs = [subprocess.Popen([sys.executable, "-c", OPENER, url, str(start), str(i)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for i in range(20)]
    outputs = [(p.wait(60), p.stdout.read().decode(errors="replace")) for p in procs]
    failed = [next((ln for ln in out.splitlines() if "Error" in ln), out[-300:]) for code, out in outputs if code]
    assert not failed, failed
    store = Store(url)
    with store.session() as s:
        assert sorted(s.exec(select(Run.id))) == sorted(f"r{i}" for i in range(20))
