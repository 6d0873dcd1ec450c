"""The `probcl` command: sub-commands (``probcl/commands/``) parse their arguments and dispatch."""

from __future__ import annotations

import argparse
import sys

import probcl.commands
from probcl.commands._failures import as_probcl_error
from probcl.core.discovery import import_submodules


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` ends every option's text with its default, unless the text says it already (``default: the
    run's``), the option is a flag, or it has none (a repeatable option that starts empty)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.nargs == 0 or action.default in (None, [], argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


def build_parser() -> tuple[argparse.ArgumentParser, dict]:
    parser = argparse.ArgumentParser(
        prog="probcl", description="Probabilistic contrastive self-supervised learning: pretrain, evaluate, score."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {}
    for module in import_submodules(probcl.commands):
        parser_of = sub.add_parser(
            module.NAME, help=module.HELP, description=module.HELP, formatter_class=DefaultsHelpFormatter
        )
        module.add_arguments(parser_of)
        commands[module.NAME] = module
    return parser, commands


def main(argv: list[str] | None = None) -> int:
    """Entry point; every failure a user can meet prints one line and returns non-zero: probcl's own errors
    (:class:`probcl.errors.ProbclError`) and the others :func:`~probcl.commands._failures.as_probcl_error` knows."""
    parser, commands = build_parser()
    args, extra = parser.parse_known_args(argv)
    module = commands[args.command]
    if extra and not getattr(module, "ACCEPTS_OVERRIDES", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return module.run(args, extra)
    except (Exception, KeyboardInterrupt) as error:  # noqa: BLE001 - sorted into user-facing failures and bugs below
        failure = as_probcl_error(error)
        if failure is None:
            raise
        print(f"probcl: {failure.kind}: {failure}", file=sys.stderr)
        return failure.exit_code


if __name__ == "__main__":
    sys.exit(main())
