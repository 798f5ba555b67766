"""`pitstop run [options] -- CMD [ARGS...]`: the entry point, dispatched before typer is imported.

Order matters, and is the point of this module:
  1. stdlib only: parse options, create the run directory, fsync metadata.json, launch the child;
  2. while the child runs: pump its output, and load the heavy parts (settings, store, classifier)
     in a background thread so a long job never waits for them;
  3. after it ends: classify, notify, record (`finish.py`), and exit with the child's code.
The child is launched before anything heavier than the standard library is imported.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pitstop.wrapper import rundir
from pitstop.wrapper.exitstatus import USAGE, shell_exit_code
from pitstop.wrapper.launch import LaunchFailed, launch
from pitstop.wrapper.pump import OutputPump, Stream
from pitstop.wrapper.signals import SignalForwarder

DRAIN_GRACE_S = 5.0  # default while settings are not loaded yet (WrapperSettings.drain_grace_s)
PROG = "pitstop run"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Run CMD, keep its logs, classify how it ended and notify.",
        usage=f"{PROG} [options] -- CMD [ARGS...]",
    )
    p.add_argument("--notify", action="append", default=[], metavar="URL",
                   help="apprise URL to notify (repeatable; added to the configured ones)")
    p.add_argument("--attach", action="append", default=[], metavar="GLOB",
                   help="attach files matching GLOB to the notification (repeatable)")
    p.add_argument("--notify-success", action="store_true", help="notify also when the run succeeds")
    p.add_argument("--name", help="a label for this run in notifications and `pitstop runs`")
    p.add_argument("--quiet", action="store_true", help="no summary line on stderr at the end")
    return p


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Options before `--`, the command after it. A command without `--` is accepted if it does
    not start with '-' (so `pitstop run python train.py` works too)."""
    if "--" in argv:
        cut = argv.index("--")
        opts, command = argv[:cut], argv[cut + 1 :]
        ns = _parser().parse_args(opts)
    else:
        ns, command = _parser().parse_known_args(argv)
        if command and command[0].startswith("-"):
            _parser().error(f"unknown option {command[0]}; put the command after --")
    if not command:
        _parser().error("no command given: pitstop run [options] -- CMD [ARGS...]")
    return ns, command


def _warn(message: str) -> None:
    try:
        os.write(2, f"pitstop: warning: {message}\n".encode("utf-8", "backslashreplace"))
    except OSError:
        pass


def _open_log(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)


def main(argv: list[str], classify: Callable | None = None) -> int:
    try:
        ns, command = parse_args(argv)
    except SystemExit as exc:  # argparse already printed the usage error or the help
        return USAGE if exc.code else 0
    epoch = time.time()
    home = rundir.resolve_home(os.environ)
    try:
        run_id, run_dir = rundir.create_run_dir(home / "runs", epoch)
        metadata = rundir.build_metadata(run_id, command, ns.name, epoch, os.environ)
        rundir.write_json_durably(run_dir / rundir.METADATA, metadata)
        fds = {n: _open_log(run_dir / n) for n in (rundir.STDOUT_LOG, rundir.STDERR_LOG, rundir.COMBINED_LOG)}
    except OSError as exc:
        return _run_unrecorded(command, home, exc)

    forwarder = SignalForwarder()
    forwarder.install()
    try:
        proc, out_r, err_r = launch(command)
    except LaunchFailed as failed:
        for fd in fds.values():
            os.close(fd)
        _write_error(run_dir, str(failed))
        os.write(2, f"pitstop: {failed}\n".encode("utf-8", "backslashreplace"))
        ended = time.time()
        loader = _Preloader(ns, metadata, run_dir, classify)
        loader.run()
        _finish(ns, metadata, run_dir, loader, failed.exit_code, None, ended, [],
                launch_error=str(failed), pump=None)
        return failed.exit_code
    forwarder.attach(proc.pid)

    pump = OutputPump(
        [Stream(out_r, b"O", 1, fds[rundir.STDOUT_LOG]), Stream(err_r, b"E", 2, fds[rundir.STDERR_LOG])],
        fds[rundir.COMBINED_LOG],
    )
    pump.start()
    loader = _Preloader(ns, metadata, run_dir, classify)
    loader_thread = threading.Thread(target=loader.run, name="pitstop-preload", daemon=True)
    loader_thread.start()

    returncode = proc.wait()
    ended = time.time()
    _drain(pump, loader.drain_grace_s)
    for fd in fds.values():
        os.close(fd)
    exit_code, sig = shell_exit_code(returncode)
    # The exit status reaches disk first: the steps below may be slow or be killed.
    try:
        rundir.write_json_durably(
            run_dir / rundir.RESULT,
            {"id": run_id, "status": "finishing", "exit_code": exit_code, "signal": sig,
             "ended_at": rundir.iso_utc(ended), "signals_forwarded": forwarder.names},
        )
    except OSError as exc:
        _warn(f"could not write {run_dir / rundir.RESULT}: {exc.strerror}")
    loader_thread.join()
    _finish(ns, metadata, run_dir, loader, exit_code, sig, ended, forwarder.names, None, pump)
    return exit_code


def _drain(pump: OutputPump, grace_s: float) -> None:
    pump.join(grace_s)
    if pump.is_alive():  # a background grandchild still holds the pipes: stop listening
        pump.stop()
        pump.join(2.0)


def _write_error(run_dir: Path, message: str) -> None:
    try:
        fd = os.open(run_dir / rundir.ERROR, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, message.encode("utf-8", "backslashreplace") + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def _run_unrecorded(command: list[str], home: Path, exc: OSError) -> int:
    """No run directory is possible (read-only or full disk): the job still runs, unwatched."""
    _warn(
        f"cannot create a run directory under {home / 'runs'} ({exc.strerror or exc}); "
        "running the command WITHOUT Pitstop logs or notification"
    )
    try:
        os.execvp(command[0], command)
    except FileNotFoundError:
        os.write(2, f"pitstop: {command[0]}: command not found\n".encode("utf-8", "backslashreplace"))
        return 127
    except OSError as err:
        os.write(2, f"pitstop: {command[0]}: {err.strerror}\n".encode("utf-8", "backslashreplace"))
        return 126
    return 126  # unreachable: execvp returns only by raising


class _Preloader:
    """Heavy set-up that can overlap the child: settings, the DB row, the classifier."""

    def __init__(self, ns: argparse.Namespace, metadata: dict, run_dir: Path, classify) -> None:
        self.ns = ns
        self.metadata = metadata
        self.run_dir = run_dir
        self.classify = classify
        self.settings = None
        self.recorder = None
        self.warnings: list[str] = []

    @property
    def drain_grace_s(self) -> float:
        return self.settings.wrapper.drain_grace_s if self.settings is not None else DRAIN_GRACE_S

    def run(self) -> None:
        try:
            self._load_settings()
            self._start_record()
            if self.classify is None:
                self._load_classifier()
        except BaseException as exc:  # never let set-up kill the wrapper: report and go on
            self.warnings.append(f"wrapper set-up failed: {exc!r}"[:400])

    def _load_settings(self) -> None:
        from pitstop.config import ConfigError, Settings, load_settings

        try:
            settings = load_settings()
        except ConfigError as exc:
            self.warnings.append(f"{exc}; using default settings for this run")
            settings = Settings.model_construct()
        updates = {}
        if self.ns.notify:
            updates["urls"] = [*settings.notify.urls, *self.ns.notify]
        if self.ns.notify_success:
            updates["on_success"] = True
        if updates:
            settings.notify = settings.notify.model_copy(update=updates)
        self.settings = settings

    def _start_record(self) -> None:
        from datetime import datetime, timezone

        from pitstop.wrapper.record import RunRecorder

        self.recorder = RunRecorder(self.settings.effective_database_url)
        started = datetime.fromtimestamp(self.metadata["started_epoch"], timezone.utc)
        problem = self.recorder.start(self.metadata, started, str(self.run_dir))
        if problem:
            self.warnings.append(problem)

    def _load_classifier(self) -> None:
        try:
            from pitstop.cli.run_glue import classify_logs
        except Exception as exc:
            self.warnings.append(f"the classifier cannot be loaded: {exc!r}"[:400])
            return
        self.classify = classify_logs


def _finish(ns, metadata, run_dir, loader, exit_code, sig, ended, forwarded, launch_error, pump) -> None:
    try:
        from datetime import datetime, timezone

        from pitstop.wrapper.finish import finish_run
        from pitstop.wrapper.outcome import RunOutcome

        warnings = list(loader.warnings)
        if pump is not None:
            warnings += [f"could not write {e}" for e in pump.sink_errors]
        outcome = RunOutcome(
            run_id=metadata["id"],
            name=metadata.get("name"),
            run_dir=run_dir,
            command=metadata["command"],
            cwd=metadata["cwd"],
            host=metadata["host"],
            user=metadata["user"],
            slurm_job_id=metadata.get("slurm_job_id"),
            started_at=datetime.fromtimestamp(metadata["started_epoch"], timezone.utc),
            ended_at=datetime.fromtimestamp(ended, timezone.utc),
            exit_code=exit_code,
            signal=sig,
            launch_error=launch_error,
            signals_forwarded=forwarded,
            stdout_bytes=pump.streams[0].bytes_read if pump else 0,
            stderr_bytes=pump.streams[1].bytes_read if pump else 0,
            stdout_newlines=pump.streams[0].newlines if pump else 0,
            stderr_newlines=pump.streams[1].newlines if pump else 0,
            warnings=warnings,
        )
        settings = loader.settings
        if settings is None:
            from pitstop.config import Settings

            settings = Settings.model_construct()
        report = finish_run(outcome, settings, ns.attach, loader.classify, loader.recorder)
    except BaseException as exc:  # the logs and exit code are safe; say what broke
        _warn(f"could not finish the run report ({exc!r}); logs are in {run_dir}")
        return
    for warning in report.warnings:
        _warn(warning)
    status = report.outcome.status(report.verdict).value
    if not ns.quiet and status != "succeeded":
        os.write(2, (
            f"pitstop: run {metadata['id']} {status}: {report.verdict.cause.value} "
            f"({report.verdict.signature}), exit {exit_code}; logs in {run_dir}\n"
        ).encode("utf-8", "backslashreplace"))
