"""``josef`` tool sub-commands (``josef topics``, ``josef console-producer``, ...).

Each module here is one sub-command, found by :func:`broker.cli.discover_commands`. Contract::

    COMMAND = "topics"                   # the sub-command name
    HELP = "Create, list and describe topics"   # one line shown by ``josef --help``

    def add_arguments(parser: argparse.ArgumentParser) -> None: ...
    def run(args: argparse.Namespace) -> int: ...   # returns the exit code

Modules whose name starts with ``_`` are helpers, not commands. Keep imports of heavy
dependencies inside ``run`` so ``josef --help`` stays fast.
"""
