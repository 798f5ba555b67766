"""`pitstop run [options] -- CMD [ARGS...]`: the entry point, dispatched before typer is imported.

Order matters, and is the point of this module:
  1. before the child starts, only modules the interpreter has already loaded (os, sys, time)
     and a few C modules: parse options, create the run directory, fsync metadata.json, spawn;
  2. while the child runs: pump its output, and load the heavy parts (settings, store) in a
     background thread so a long job never waits for them;
  3. after it ends: classify the complete logs (in a separate process), notify, record
     (`finish.py`), and exit with the child's code.
Every import on the path to the spawn is paid on every job launch: keep it that way
(tests/wrapper/test_supervise.py checks it).
"""

from __future__ import annotations

import os
import sys
import time

from pitstop.wrapper import rundir
from pitstop.wrapper.exitstatus import USAGE, shell_exit_code
from pitstop.wrapper.launch import LaunchFailed, launch, wait_exit
from pitstop.wrapper.options import USAGE as USAGE_LINE
from pitstop.wrapper.options import HelpRequested, RunOptions, UsageError, help_text, parse_args
from pitstop.wrapper.signals import SignalForwarder

DRAIN_GRACE_S = 5.0  # default while settings are not loaded yet (WrapperSettings.drain_grace_s)
LOGS = (rundir.STDOUT_LOG, rundir.STDERR_LOG, rundir.COMBINED_LOG)


# The classifier runs in its own process, named here by its command line: the wrapper (core) never
# imports `classifiers` nor the CLI package (tests/test_layering.py). pitstop/cli/run_classifier.py uses
# the same command for `pitstop runs show`.
CLASSIFY_WORKER_MODULE = "pitstop.cli.classify_worker"


def worker_argv() -> tuple[str, ...]:
    """The classifier worker's command: the same interpreter, so it sees the same packages."""
    return (sys.executable, "-m", CLASSIFY_WORKER_MODULE)


def _warn(message: str) -> None:
    try:
        os.write(2, f"pitstop: warning: {message}\n".encode("utf-8", "backslashreplace"))
    except OSError:
        pass


def _say(message: str) -> None:
    try:
        os.write(2, message.encode("utf-8", "backslashreplace"))
    except OSError:
        pass


def _open_log(path: str) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)


def main(argv: list[str], classify=None) -> int:
    try:
        ns, command = parse_args(argv)
    except HelpRequested:
        sys.stdout.write(help_text())
        return 0
    except UsageError as exc:
        _say(f"{USAGE_LINE}\npitstop run: error: {exc}\n")
        return USAGE
    epoch = time.time()
    home = rundir.resolve_home(os.environ)
    runs_dir = os.path.join(home, "runs")
    try:
        run_id, run_dir, metadata = rundir.create_run(
            runs_dir, epoch,
            lambda rid: rundir.build_metadata(rid, command, ns.name, epoch, os.environ),
        )
        fds = {n: _open_log(os.path.join(run_dir, n)) for n in LOGS}
    except OSError as exc:
        return _run_unrecorded(command, runs_dir, exc)

    forwarder = SignalForwarder()
    forwarder.install()
    try:
        pid, out_r, err_r = launch(command)
    except LaunchFailed as failed:
        for fd in fds.values():
            os.close(fd)
        _write_error(run_dir, str(failed))
        _say(f"pitstop: {failed}\n")
        ended = time.time()
        loader = _Preloader(ns, metadata, run_dir, classify)
        loader.run(want_classifier=False)  # nothing ran, nothing to classify
        _finish(ns, metadata, run_dir, loader, failed.exit_code, None, ended, [],
                launch_error=str(failed), pump=None)
        return failed.exit_code
    forwarder.attach(pid)
    # --- the child is running: from here on, imports cost the job nothing --------------------
    import threading

    from pitstop.wrapper.pump import OutputPump, Stream

    pump = OutputPump(
        [Stream(out_r, b"O", 1, fds[rundir.STDOUT_LOG]), Stream(err_r, b"E", 2, fds[rundir.STDERR_LOG])],
        fds[rundir.COMBINED_LOG],
    )
    pump.start()
    loader = _Preloader(ns, metadata, run_dir, classify)
    loader_thread = threading.Thread(target=loader.run, name="pitstop-preload", daemon=True)
    loader_thread.start()

    returncode = wait_exit(pid)
    ended = time.time()
    _drain(pump, loader.drain_grace_s)
    for fd in fds.values():
        os.close(fd)
    exit_code, sig = shell_exit_code(returncode)
    # The exit status reaches disk first: the steps below may be slow or be killed.
    try:
        rundir.write_json_durably(
            os.path.join(run_dir, rundir.RESULT),
            {"id": run_id, "status": "finishing", "exit_code": exit_code, "signal": sig,
             "ended_at": rundir.iso_utc(ended), "signals_forwarded": forwarder.names},
        )
    except OSError as exc:
        _warn(f"could not write {os.path.join(run_dir, rundir.RESULT)}: {exc.strerror}")
    loader_thread.join()
    try:
        _finish(ns, metadata, run_dir, loader, exit_code, sig, ended, forwarder.names, None, pump)
    finally:
        loader.close()
    return exit_code


def _drain(pump, grace_s: float) -> None:
    pump.join(grace_s)
    if pump.is_alive():  # a background grandchild still holds the pipes: stop listening
        pump.stop()
        pump.join(2.0)


def _write_error(run_dir: str, message: str) -> None:
    try:
        fd = os.open(os.path.join(run_dir, rundir.ERROR), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, message.encode("utf-8", "backslashreplace") + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def _run_unrecorded(command: list[str], runs_dir: str, exc: OSError) -> int:
    """No run directory is possible (read-only or full disk): the job still runs, unwatched."""
    _warn(
        f"cannot create a run directory under {runs_dir} ({exc.strerror or exc}); "
        "running the command WITHOUT Pitstop logs or notification"
    )
    try:
        os.execvp(command[0], command)
    except FileNotFoundError:
        _say(f"pitstop: {command[0]}: command not found\n")
        return 127
    except OSError as err:
        _say(f"pitstop: {command[0]}: {err.strerror}\n")
        return 126
    return 126  # unreachable: execvp returns only by raising


class _Preloader:
    """Heavy set-up that can overlap the child: settings, the DB row, the classifier."""

    def __init__(self, ns: RunOptions, metadata: dict, run_dir: str, classify) -> None:
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

    def run(self, want_classifier: bool = True) -> None:
        try:
            if want_classifier and self.classify is None:
                self._start_classifier()  # first: its start-up (~1 s) overlaps everything else
            self._load_settings()
            self._start_record()
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

    def _start_classifier(self) -> None:
        try:
            from pitstop.wrapper.classify_child import ClassifierProcess

            # Same paths, same order as finish.classify_run asks about: the worker scans them
            # while the job writes them, so the verdict does not wait for a whole re-read.
            self.classify = ClassifierProcess(
                worker_argv(), [os.path.join(self.run_dir, name) for name in rundir.CLASSIFIED_LOGS]
            )
        except Exception as exc:
            self.warnings.append(f"the classifier cannot be started: {exc}"[:400])

    def close(self) -> None:
        close = getattr(self.classify, "close", None)
        if close is not None:
            close()


def _finish(ns, metadata, run_dir, loader, exit_code, sig, ended, forwarded, launch_error, pump) -> None:
    try:
        from datetime import datetime, timezone

        from pathlib import Path

        from pitstop.wrapper.finish import finish_run
        from pitstop.wrapper.outcome import RunOutcome

        warnings = list(loader.warnings)
        if pump is not None:
            warnings += [f"could not write {e}" for e in pump.sink_errors]
        outcome = RunOutcome(
            run_id=metadata["id"],
            name=metadata.get("name"),
            run_dir=Path(run_dir),
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
        _say(
            f"pitstop: run {metadata['id']} {status}: {report.verdict.cause.value} "
            f"({report.verdict.signature}), exit {exit_code}; logs in {run_dir}\n"
        )
