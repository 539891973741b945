"""The console entry point (``envguard`` and ``python -m envguard``).

It sits outside :mod:`envguard.cli` so that a Ctrl-C while the command line's libraries are
still being imported ends like any other interrupt: one line and exit 130, no traceback.
"""

import sys


def main() -> None:
    if sys.argv[1:] == ["--help"]:
        from envguard import help_screen

        if help_screen.wide_enough():
            code = help_screen.write()
            if code:
                raise SystemExit(code)
            return
    from envguard import prestart

    try:
        prestart.start(sys.argv[1:])  # the probe works while typer loads
        from envguard.cli import main as cli_main
    except KeyboardInterrupt:
        prestart.stop()
        sys.stderr.write("error: interrupted (SIGINT)\n")
        raise SystemExit(130) from None
    try:
        cli_main()
    finally:
        prestart.stop()  # a guess the command did not take (an error, --help): stopped


if __name__ == "__main__":
    main()
