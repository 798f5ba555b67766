"""Where a hook writes when PITSTOP_HOME cannot be written (a read-only mount, a full disk).

An event is never dropped silently: the hook spools it under the first usable fallback root
instead (`$XDG_RUNTIME_DIR/pitstop`, then `/tmp/pitstop-<uid>`), and says so in hooks.log.
Deliverers (`pitstop spool flush`, the deliverer in `pitstop up`, the next hook) look in the
fallback spools too. /tmp is shared by every user, so a fallback root is used only if this user
owns it, it is a real directory (not a symlink someone planted) and nobody else may write it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path


def candidate_roots(env: Mapping[str, str] | None = None) -> list[Path]:
    env = os.environ if env is None else env
    roots = []
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        roots.append(Path(runtime) / "pitstop")
    roots.append(Path("/tmp") / f"pitstop-{os.getuid()}")
    return roots


def private_dir(path: Path, create: bool) -> bool:
    """True when `path` is a directory only this user can write (made 0700 if `create`)."""
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def usable_roots(create: bool, env: Mapping[str, str] | None = None) -> Iterator[Path]:
    """Fallback roots that are safe to use, in order; lazily, so `create=True` makes a root
    only when every earlier one was refused. `create=False` only yields those that exist."""
    return (root for root in candidate_roots(env) if private_dir(root, create))


def fallback_spool_dirs(env: Mapping[str, str] | None = None) -> list[Path]:
    """Fallback spools that exist (for deliverers and `spool list`)."""
    return [root / "spool" for root in usable_roots(create=False, env=env) if (root / "spool").is_dir()]
