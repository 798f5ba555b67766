"""The options of `pitstop run`, parsed with no import at all (argparse costs ~5 ms per job launch).

    pitstop run [options] -- CMD [ARGS...]
    pitstop run [options] CMD [ARGS...]      (CMD must not start with '-')
"""

from __future__ import annotations

PROG = "pitstop run"
USAGE = f"usage: {PROG} [options] -- CMD [ARGS...]"

# flag -> (attribute, takes a value, help). Repeatable flags are the list-valued attributes.
OPTIONS: dict[str, tuple[str, bool, str]] = {
    "--notify": ("notify", True, "apprise URL to notify (repeatable; added to the configured ones)"),
    "--attach": ("attach", True, "attach files matching GLOB to the notification (repeatable)"),
    "--notify-success": ("notify_success", False, "notify also when the run succeeds"),
    "--name": ("name", True, "a label for this run in notifications and `pitstop runs`"),
    "--quiet": ("quiet", False, "no summary line on stderr at the end"),
}
METAVARS = {"--notify": "URL", "--attach": "GLOB", "--name": "NAME"}


class UsageError(Exception):
    """Bad command line; the message is printed after the usage line, exit status 2."""


class HelpRequested(Exception):
    pass


class RunOptions:
    __slots__ = ("notify", "attach", "notify_success", "name", "quiet")

    def __init__(self) -> None:
        self.notify: list[str] = []
        self.attach: list[str] = []
        self.notify_success = False
        self.name: str | None = None
        self.quiet = False


def help_text() -> str:
    rows = [f"  {flag + ' ' + METAVARS.get(flag, '') if takes else flag:<22} {text}"
            for flag, (_, takes, text) in OPTIONS.items()]
    return (
        f"{USAGE}\n\nRun CMD, keep its logs, classify how it ended and notify.\n\noptions:\n"
        "  -h, --help             show this help and exit\n" + "\n".join(rows) + "\n"
    )


def parse_args(argv: list[str]) -> tuple[RunOptions, list[str]]:
    """(options, command). Options end at `--` or at the first word not starting with '-'."""
    opts = RunOptions()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        if arg in ("-h", "--help"):
            raise HelpRequested
        flag, has_inline, inline = arg.partition("=")
        spec = OPTIONS.get(flag)
        if spec is None:
            raise UsageError(f"unknown option {arg}; put the command after --")
        attr, takes_value, _ = spec
        if not takes_value:
            if has_inline:
                raise UsageError(f"{flag} takes no value")
            setattr(opts, attr, True)
            i += 1
            continue
        if has_inline:
            value, i = inline, i + 1
        elif i + 1 < len(argv):
            value, i = argv[i + 1], i + 2
        else:
            raise UsageError(f"{flag} needs a value ({METAVARS.get(flag, 'VALUE')})")
        current = getattr(opts, attr)
        if isinstance(current, list):
            current.append(value)
        else:
            setattr(opts, attr, value)
    command = argv[i:]
    if not command:
        raise UsageError(f"no command given: {PROG} [options] -- CMD [ARGS...]")
    return opts, command
