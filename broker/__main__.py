"""``python -m broker CONFIG [--override key=value ...]``: the same as ``josef server``."""

import sys

from broker.cli import main

if __name__ == "__main__":
    sys.exit(main(["server", *sys.argv[1:]]))
