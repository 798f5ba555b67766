"""`pitstop run`'s supervisor: nothing heavy before the child starts, and no Prefect at all."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
loaded = set(sys.modules)
import pitstop.wrapper.supervise as supervise
# paid on every job launch: pure-Python stdlib modules that would add milliseconds
slow = sorted(m for m in set(sys.modules) - loaded if m in ('pathlib', 're', 'json', 'argparse', 'subprocess', 'signal', 'threading', 'enum', 'dataclasses'))
assert not slow, f"imported before the child starts: {slow}"
before = sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'sqlmodel', 'sqlalchemy', 'prefect', 'typer', 'rich', 'classifiers', 'apprise'))
rc = supervise.main(['--quiet', '--', 'sh', '-c', 'exit 5'])
after = sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in ('prefect', 'typer', 'rich', 'apprise', 'paramiko')})
print(before, after, rc)
"""


def test_nothing_heavy_before_launch_and_no_prefect(isolated_home) -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] [] 5"
