"""Sub-commands of `probcl`, one module each, discovered at start-up.

A command module defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args, extra) -> int`` (``extra``: unparsed tokens, only accepted when the module
sets ``ACCEPTS_OVERRIDES = True``). Modules only parse and dispatch to the library.
"""
