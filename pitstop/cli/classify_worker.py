"""`python -m pitstop.cli.classify_worker`: the classifier process behind `pitstop run`.

The wrapper starts it while the job runs, so imports and rule compilation (~1 s) are done by
the time the job ends. Requests arrive on stdin, one JSON object a line:
  {"follow": [paths]}                 optional, first: scan these logs while the job writes them
  {"paths": [...], "facts": {...}}    the job has ended and its logs are closed: give the verdict
It answers on stdout, one JSON object a line (protocol in pitstop/wrapper/classify_child.py):
first the exit-status-only verdict, so a timeout still has one, then the verdict over the
complete logs. If the wrapper goes away before sending a request (stdin closes), it just exits.
"""

from __future__ import annotations

import json
import os
import sys
import threading


NICENESS = 5


def _say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _read_request(stdin) -> dict | None:
    raw = stdin.readline(1 << 20)
    if not raw.strip():
        return None
    request = json.loads(raw)
    if not isinstance(request, dict):
        raise ValueError("a request must be a JSON object")
    return request


class _Follower:
    """Scans the followed logs as they grow, one thread each (stderr may stay quiet while stdout
    fills); `ended` tells them the wrapper has closed the logs."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths
        self.ended = threading.Event()
        self._scans: list = [None] * len(paths)
        self._errors: list[Exception | None] = [None] * len(paths)
        self._threads = [
            threading.Thread(target=self._scan_one, args=(i,), name=f"pitstop-follow-{i}", daemon=True)
            for i in range(len(paths))
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _scan_one(self, index: int) -> None:
        from classifiers import scan_logs
        from pitstop.wrapper.follow import FollowedLog

        try:
            self._scans[index] = scan_logs(
                [self.paths[index]], open_log=lambda path: FollowedLog(path, self.ended)
            )
        except Exception as exc:  # ClassifyError names the file; reported with the verdict
            self._errors[index] = exc

    def finish(self):
        """The scan of the complete logs (raises what a scan raised, e.g. ClassifyError)."""
        from classifiers import LogScan

        self.ended.set()
        for thread in self._threads:
            thread.join()
        for error in self._errors:
            if error is not None:
                raise error
        # One table for all (a site-rule file edited between two scans: the first scan's table
        # keeps its hits' indexes meaningful); the excerpts feed the learned fallback.
        tables = [scan.rules for scan in self._scans if scan.rules is not None]
        return LogScan(sources=[source for scan in self._scans for source in scan.sources],
                       rules=tables[0] if tables and all(t is tables[0] for t in tables) else None,
                       excerpts=[e for scan in self._scans for e in scan.excerpts])


def main() -> int:
    from classifiers import ClassifyError, classify_files, classify_scanned, scan_logs
    from pitstop.files import open_regular
    from pitstop.models import SchedulerFacts

    try:
        os.nice(NICENESS)  # it scans beside the job: the job's own processes come first
    except OSError:
        pass
    classify_files([])  # compiles the rule set now, while the job still runs
    stdin = sys.stdin.buffer
    follower: _Follower | None = None
    try:
        request = _read_request(stdin)
        if request is not None and "follow" in request:
            follower = _Follower([str(p) for p in request["follow"]])
            follower.start()
            request = _read_request(stdin)
        if request is None:
            return 0  # the wrapper ended (or was killed) without asking
        paths = [str(p) for p in request.get("paths", [])]
        facts = SchedulerFacts.model_validate(request.get("facts") or {})
    except ValueError as exc:
        _say({"stage": "error", "error": f"bad request from the wrapper: {exc}"})
        return 2

    _say({"stage": "facts", "verdict": classify_files([], facts=facts).model_dump(mode="json")})
    try:
        if follower is not None and _same(follower.paths, paths):
            verdict = classify_scanned(follower.finish(), facts)
        else:
            if follower is not None:
                follower.ended.set()  # asked about other files: read them from the start
            # open_regular: a log swapped for a FIFO or a device must not hang the worker
            verdict = classify_scanned(scan_logs(paths, open_log=open_regular), facts)
    except ClassifyError as exc:
        _say({"stage": "error", "error": str(exc)})
        return 1
    _say({"stage": "full", "verdict": verdict.model_dump(mode="json")})
    return 0


def _same(a: list[str], b: list[str]) -> bool:
    return [os.path.abspath(p) for p in a] == [os.path.abspath(p) for p in b]


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # do not wait for a follower still blocked on a log nobody will finish
