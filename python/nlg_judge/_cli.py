"""The ``nlg-judge`` command installed with the package: the same command as the Rust
binary, run in this process."""

from __future__ import annotations

import signal
import sys

from . import _native


def main() -> None:
    """Run ``nlg-judge`` with the process's arguments and exit with its code."""
    # The command handles no Python signals: Ctrl-C ends it as it ends the binary
    # (everything computed is in the result cache already).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(_native.run_cli(["nlg-judge", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
