"""The `probcl` command: sub-commands (``probcl/commands/``) parse their arguments and dispatch."""
from __future__ import annotations

import argparse
import sys
from typing import Optional

import probcl.commands
from probcl.discovery import import_submodules


def build_parser() -> tuple[argparse.ArgumentParser, dict]:
    parser = argparse.ArgumentParser(
        prog="probcl", description="Probabilistic contrastive self-supervised learning: pretrain, evaluate, score.")
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {}
    for module in import_submodules(probcl.commands):
        module.add_arguments(sub.add_parser(module.NAME, help=module.HELP, description=module.HELP))
        commands[module.NAME] = module
    return parser, commands


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point; expected failures print one line naming the problem and return non-zero."""
    from probcl.config import ConfigError
    from probcl.data.datasets import DatasetError
    from probcl.methods import TrainingDivergedError
    from probcl.registry import UnknownNameError
    from probcl.runs import RunError

    parser, commands = build_parser()
    args, extra = parser.parse_known_args(argv)
    module = commands[args.command]
    if extra and not getattr(module, "ACCEPTS_OVERRIDES", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return module.run(args, extra)
    except (ConfigError, UnknownNameError) as e:
        print(f"probcl: config error: {e}", file=sys.stderr)
        return 2
    except (DatasetError, RunError, TrainingDivergedError) as e:
        print(f"probcl: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
