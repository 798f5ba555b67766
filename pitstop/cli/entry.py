"""`pitstop` console entry point.

`pitstop run` is dispatched before typer, rich or pydantic are imported: it sits in front of every
training job, so its start-up cost is paid on every launch. Everything else goes through typer.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] == "run" and not {"-h", "--help"} & set(args[1:2]):
        from pitstop.wrapper.fastpath import main as run_main

        sys.exit(run_main(args[1:]))
    from pitstop.cli.app import build_app

    build_app()(args=args, prog_name="pitstop")


if __name__ == "__main__":
    main()
