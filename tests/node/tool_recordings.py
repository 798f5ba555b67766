"""A `Runner` that answers node tools with recorded output (fixtures), for hardware absent here
(NVMe drives, a BMC, systemd as PID 1). It records the argv it was asked, so tests also check
what the check would have run on a real node."""

from __future__ import annotations

from pathlib import Path

from pitstop.node.tool import ToolOutput, ToolTimedOut, ToolUnavailable


class RecordedRunner:
    def __init__(self, answers: dict[tuple[str, ...], ToolOutput | Exception | str | Path]) -> None:
        self.answers = answers  # argv prefix -> output (str/Path: stdout with exit 0) or exception
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], timeout_s: float) -> ToolOutput:
        self.calls.append(list(argv))
        for prefix, answer in sorted(self.answers.items(), key=lambda kv: -len(kv[0])):
            if tuple(argv[:len(prefix)]) == prefix:
                if isinstance(answer, Exception):
                    raise answer
                if isinstance(answer, Path):
                    answer = answer.read_text()
                if isinstance(answer, str):
                    return ToolOutput(argv=argv, returncode=0, stdout=answer)
                return answer
        raise ToolUnavailable(f"{argv[0]} is not installed on this node")


def missing(tool: str) -> ToolUnavailable:
    return ToolUnavailable(f"{tool} is not installed on this node")


def timed_out(tool: str, timeout_s: float = 10) -> ToolTimedOut:
    return ToolTimedOut(f"{tool} did not answer within {timeout_s:g} s")
