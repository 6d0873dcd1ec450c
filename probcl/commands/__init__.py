"""Sub-commands of `probcl`, one module each, discovered at start-up.

A command module declares ``NAME``, ``HELP``, ``ACCEPTS_OVERRIDES`` (whether the tokens
argparse leaves, ``--section.key VALUE`` config overrides, reach it), ``AFTER_A_STOP`` (what to do after a
Ctrl-C, a full disk or a lost process, once the cause is dealt with: the end of that one-line message),
``add_arguments(parser)`` and ``run(args, extra) -> int`` (``extra``: those tokens).
Modules only parse and dispatch to the library.
"""
