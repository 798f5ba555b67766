"""`python -m pitstop.cli.classify_worker`: the classifier process behind `pitstop run`.

The wrapper starts it while the job runs, so imports and rule compilation (~1 s) are done by
the time the job ends. Then it reads {"paths": [...], "facts": {...}} on stdin and answers on
stdout, one JSON object a line (protocol in pitstop/wrapper/classify_child.py): first the
exit-status-only verdict, so a timeout still has one, then the verdict over the complete logs.
If the wrapper goes away before sending a request (stdin closes empty), it just exits.
"""

from __future__ import annotations

import json
import sys


def _say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def main() -> int:
    from classifiers import ClassifyError, classify_files
    from pitstop.models import SchedulerFacts

    classify_files([])  # compiles the rule set now, while the job still runs
    raw = sys.stdin.buffer.read(1 << 20)
    if not raw.strip():
        return 0  # the wrapper ended (or was killed) without asking
    try:
        request = json.loads(raw)
        paths = [str(p) for p in request.get("paths", [])]
        facts = SchedulerFacts.model_validate(request.get("facts") or {})
    except ValueError as exc:
        _say({"stage": "error", "error": f"bad request from the wrapper: {exc}"})
        return 2

    _say({"stage": "facts", "verdict": classify_files([], facts=facts).model_dump(mode="json")})
    try:
        verdict = classify_files(paths, facts=facts)
    except ClassifyError as exc:
        _say({"stage": "error", "error": str(exc)})
        return 1
    _say({"stage": "full", "verdict": verdict.model_dump(mode="json")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
