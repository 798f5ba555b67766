"""`pitstop` console entry point.

`pitstop run` is dispatched before typer, rich or pydantic are imported: it sits in front of every
training job, so its start-up cost is paid on every launch. `pitstop epilog|prolog` (Slurm hooks)
and `pitstop node-check` (every node, every health sweep) skip typer too. Everything else goes
through typer.
"""

from __future__ import annotations

import sys

# Slurm hooks run around every job: skip typer/rich (see pitstop/events/hooks.py).
HOOKS = ("epilog", "prolog")


def _run_hook(name: str) -> int:
    from pitstop.events import hooks

    return hooks.run_epilog() if name == "epilog" else hooks.run_prolog()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] == "run" and not {"-h", "--help"} & set(args[1:2]):
        from pitstop.wrapper.supervise import main as run_main

        sys.exit(run_main(args[1:]))
    if args and args[0] in HOOKS and not {"-h", "--help"} & set(args[1:]):
        sys.exit(_run_hook(args[0]))
    if args and args[0] == "node-check":
        from pitstop.cli import node_check_fast

        opts = node_check_fast.parse(args[1:])
        if opts is not None:  # else typer parses, and words any error as before
            sys.exit(node_check_fast.node_check(opts))
    from pitstop.cli.app import build_app

    build_app()(args=args, prog_name="pitstop")


if __name__ == "__main__":
    main()
