"""The console entry point (``envguard`` and ``python -m envguard``).

It sits outside :mod:`envguard.cli` so that a Ctrl-C while the command line's libraries are
still being imported ends like any other interrupt: one line and exit 130, no traceback.
"""

import sys


def main() -> None:
    try:
        from envguard.cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted (SIGINT)\n")
        raise SystemExit(130) from None
    cli_main()


if __name__ == "__main__":
    main()
