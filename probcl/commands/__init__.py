"""Sub-commands of `probcl`, one module each, discovered at start-up.

A command module declares ``NAME``, ``HELP``, ``ACCEPTS_OVERRIDES`` (whether the tokens
argparse leaves, ``--section.key VALUE`` config overrides, reach it), ``add_arguments(parser)`` and
``run(args, extra) -> int`` (``extra``: those tokens). Modules only parse and dispatch to the library.
"""
