"""The `probcl` command: sub-commands (``probcl/commands/``) parse their arguments and dispatch."""

from __future__ import annotations

import argparse
import sys

import probcl.commands
from probcl.core.discovery import import_submodules


def build_parser() -> tuple[argparse.ArgumentParser, dict]:
    parser = argparse.ArgumentParser(
        prog="probcl", description="Probabilistic contrastive self-supervised learning: pretrain, evaluate, score."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {}
    for module in import_submodules(probcl.commands):
        module.add_arguments(sub.add_parser(module.NAME, help=module.HELP, description=module.HELP))
        commands[module.NAME] = module
    return parser, commands


def main(argv: list[str] | None = None) -> int:
    """Entry point; expected failures (:class:`probcl.errors.ProbclError`) print one line and return non-zero."""
    from probcl.errors import ProbclError

    parser, commands = build_parser()
    args, extra = parser.parse_known_args(argv)
    module = commands[args.command]
    if extra and not getattr(module, "ACCEPTS_OVERRIDES", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return module.run(args, extra)
    except ProbclError as e:
        print(f"probcl: {e.kind}: {e}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
