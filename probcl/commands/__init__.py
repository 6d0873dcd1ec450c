"""Sub-commands of `probcl`, one module each, discovered at start-up.

A command module declares ``NAME``, ``HELP``, ``ACCEPTS_OVERRIDES`` (whether unparsed
``key=value`` tokens after the arguments reach it), ``add_arguments(parser)`` and
``run(args, extra) -> int`` (``extra``: those tokens). Modules only parse and dispatch to the library.
"""
