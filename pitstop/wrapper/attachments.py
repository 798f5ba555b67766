"""Choose what to attach within the per-file and total budgets; list everything left out."""

from __future__ import annotations

import glob
import os
from pathlib import Path

from pydantic import BaseModel, Field

from pitstop.config import WrapperSettings
from pitstop.wrapper.excerpt import human_bytes, printable, write_head_tail

MAX_MATCHES_PER_GLOB = 1000  # beyond this a glob is a mistake; the rest is counted, not listed


class AttachedFile(BaseModel):
    name: str
    path: Path
    size: int
    note: str = ""


class SkippedFile(BaseModel):
    name: str
    size: int | None = None
    reason: str


class AttachmentPlan(BaseModel):
    attached: list[AttachedFile] = Field(default_factory=list)
    skipped: list[SkippedFile] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @property
    def paths(self) -> list[Path]:
        return [a.path for a in self.attached]


class _Budget:
    def __init__(self, per_file: int, total: int) -> None:
        self.per_file = per_file
        self.total = total
        self.used = 0

    def refuse(self, size: int) -> str | None:
        if size > self.per_file:
            return f"larger than the per-file limit ({human_bytes(self.per_file)})"
        if self.used + size > self.total:
            return (
                f"would exceed the total attachment budget ({human_bytes(self.total)}, "
                f"{human_bytes(self.used)} already used)"
            )
        return None


def plan_attachments(
    log: Path, globs: list[str], cwd: Path, settings: WrapperSettings, excerpt_dir: Path
) -> AttachmentPlan:
    """The run log first (whole, or head+tail when large), then each --attach glob in order."""
    plan = AttachmentPlan()
    budget = _Budget(settings.attach_max_file_bytes, settings.attach_max_total_bytes)
    _plan_log(plan, budget, log, settings.log_excerpt_bytes, excerpt_dir)
    seen: set[Path] = {log.resolve()}
    for pattern in globs:
        _plan_glob(plan, budget, pattern, cwd, seen)
    return plan


def _plan_log(plan: AttachmentPlan, budget: _Budget, log: Path, excerpt_bytes: int, out: Path) -> None:
    try:
        size = log.stat().st_size
    except OSError as exc:
        plan.skipped.append(SkippedFile(name=log.name, reason=f"cannot read: {exc.strerror}"))
        return
    if size == 0:
        plan.notes.append(f"{log.name} is empty: the command printed nothing")
        return
    path, note = log, ""
    if size > excerpt_bytes:
        try:
            path = out / f"{log.stem}.excerpt{log.suffix}"
            _, excerpt_size = write_head_tail(log, path, excerpt_bytes)
        except OSError as exc:
            plan.skipped.append(SkippedFile(name=log.name, size=size, reason=f"cannot excerpt: {exc}"))
            return
        note = (
            f"first and last {human_bytes(excerpt_bytes // 2)} of {log.name} "
            f"({human_bytes(size)}); the full log stays at {log}"
        )
        plan.notes.append(f"{log.name} is {human_bytes(size)}: attached its head and tail as {path.name}")
        size = excerpt_size
    refused = budget.refuse(size)
    if refused:
        plan.skipped.append(SkippedFile(name=path.name, size=size, reason=refused))
        return
    budget.used += size
    plan.attached.append(AttachedFile(name=path.name, path=path, size=size, note=note))


def _plan_glob(plan: AttachmentPlan, budget: _Budget, pattern: str, cwd: Path, seen: set[Path]) -> None:
    root = None if os.path.isabs(pattern) else cwd
    try:
        matches = glob.iglob(pattern, root_dir=root, recursive=True)
        names: list[str] = []
        extra = 0
        for name in matches:
            if len(names) < MAX_MATCHES_PER_GLOB:
                names.append(name)
            else:
                extra += 1
    except OSError as exc:
        plan.notes.append(f"--attach {printable(pattern)}: cannot search: {exc.strerror}")
        return
    if not names:
        plan.notes.append(f"--attach {printable(pattern)}: no files matched")
        return
    for name in sorted(names):
        path = Path(name) if root is None else root / name
        shown = printable(name)
        try:
            resolved = path.resolve()
            if resolved in seen:
                continue
            seen.add(resolved)
            if path.is_dir():
                plan.skipped.append(SkippedFile(name=shown, reason="a directory, not a file"))
                continue
            size = path.stat().st_size
            if not os.access(path, os.R_OK):
                raise PermissionError(13, "permission denied")
        except OSError as exc:
            plan.skipped.append(SkippedFile(name=shown, reason=f"cannot read: {exc.strerror or exc}"))
            continue
        refused = budget.refuse(size)
        if refused:
            plan.skipped.append(SkippedFile(name=shown, size=size, reason=refused))
            continue
        budget.used += size
        plan.attached.append(AttachedFile(name=shown, path=path, size=size))
    if extra:
        plan.skipped.append(
            SkippedFile(
                name=f"{extra} more files matching {printable(pattern)}",
                reason=f"over {MAX_MATCHES_PER_GLOB} matches for one --attach; not examined",
            )
        )
