"""The `probcl` command: sub-commands (``probcl/commands/``) parse their arguments and dispatch."""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import PackageNotFoundError, version

import probcl.commands
from probcl.commands._failures import as_probcl_error
from probcl.core.allocator import reuse_freed_memory
from probcl.core.discovery import import_submodules
from probcl.core.termination import Terminated, sigterm_raises


def versions() -> str:
    """``probcl X (torch Y)``: probcl's version and the installed torch's, read without importing torch."""
    try:
        torch = version("torch")
    except PackageNotFoundError:
        torch = "not installed"
    return f"probcl {probcl.__version__} (torch {torch})"


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` ends every option's text with its default, unless the text says it already (``default: the
    run's``), the option is a flag, or it has none (a repeatable option that starts empty)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = str(action.help or "")  # a lazily rendered help (an object whose str() is the text) too
        if "default" in text or action.nargs == 0 or action.default in (None, [], argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


def build_parser() -> tuple[argparse.ArgumentParser, dict]:
    parser = argparse.ArgumentParser(
        prog="probcl", description="Probabilistic contrastive self-supervised learning: pretrain, evaluate, score."
    )
    parser.add_argument("--version", action="version", version=versions(), help="print probcl's and torch's versions")
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {}
    for module in import_submodules(probcl.commands):
        parser_of = sub.add_parser(
            module.NAME, help=module.HELP, description=module.HELP, formatter_class=DefaultsHelpFormatter
        )
        module.add_arguments(parser_of)
        commands[module.NAME] = module
    return parser, commands


def silence_stdout() -> None:
    """Point the standard output at /dev/null, so that the interpreter's last flush of output a closed pipe
    no longer takes does not print a traceback (the recipe of Python's ``signal`` documentation)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    """Entry point; every failure a user can meet prints one line and returns non-zero: probcl's own errors
    (:class:`probcl.errors.ProbclError`) and the others :func:`~probcl.commands._failures.as_probcl_error` knows."""
    parser, commands = build_parser()
    args, extra = parser.parse_known_args(argv)
    module = commands[args.command]
    if extra and not module.ACCEPTS_OVERRIDES:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    reuse_freed_memory()  # inference batch after batch without a page fault per 4 KiB (probcl.core.allocator)
    try:
        with sigterm_raises():  # a SIGTERM unwinds (locks released, temporary files removed) and exits 143
            code = module.run(args, extra)
        sys.stdout.flush()  # a closed pipe fails here, not in the interpreter's exit
        return code
    except BrokenPipeError:  # the reader went away (`probcl list | head`): stop quietly, as cat and ls do
        silence_stdout()
        return 1
    except (Exception, KeyboardInterrupt, Terminated) as error:  # noqa: BLE001 - sorted into user-facing failures and bugs below
        failure = as_probcl_error(error, module.AFTER_A_STOP)
        if failure is None:
            raise
        print(f"probcl: {failure.kind}: {failure}", file=sys.stderr)
        return failure.exit_code


if __name__ == "__main__":
    sys.exit(main())
