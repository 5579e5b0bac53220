"""The ``stirgpu`` command line: the only part of stirgpu that prints.

:mod:`.main` builds the argument parser from the subcommand modules listed in
``main.SUBCOMMANDS``; each module has ``register(subparsers)`` and sets ``run``.
"""
