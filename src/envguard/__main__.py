"""The console entry point (``envguard`` and ``python -m envguard``).

It sits outside :mod:`envguard.cli`, before typer loads: the root ``--help`` is written from
help_screen; a plain ``snapshot`` or ``diff`` gets its probe started (prestart) while typer
loads; a signal while the command line's libraries are still being imported ends like any
other interrupt (one line, exit 128 + N, the early probe stopped), and so does any other
failure there (the probe stopped, the error as it is).
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
    from envguard.lifecycle import handle_signals, interrupt_behind, signals_ignored_from_now

    handle_signals()  # before any probe starts: an interrupt stops it, whenever it comes
    try:
        prestart.start(sys.argv[1:])  # the probe works while typer loads
        from envguard.cli import main as cli_main

        # The CLI reports an interrupt itself once its command line runs; one that comes
        # before (while it sets up) is reported here.
        cli_main()
    except (KeyboardInterrupt, Exception) as exc:
        signum = interrupt_behind(exc)
        if signum is None:
            raise  # not a signal's doing: the error as it is
        prestart.stop()
        import signal

        sys.stderr.write(f"error: interrupted ({signal.Signals(signum).name})\n")
        raise SystemExit(128 + signum) from None
    finally:
        try:
            prestart.stop()  # a guess the command did not take (an error, --help): stopped
        finally:
            signals_ignored_from_now()


if __name__ == "__main__":
    main()
