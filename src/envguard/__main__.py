"""The console entry point (``envguard`` and ``python -m envguard``).

It sits outside :mod:`envguard.cli`, before typer loads: the root ``--help`` is written from
help_screen; a plain ``snapshot`` or ``diff`` gets its probe started (prestart) while typer
loads; a signal while the command line's libraries are still being imported ends like any
other interrupt (one line, exit 128 + N, the early probe stopped), and so does any other
failure there (the probe stopped, the error as it is). Once the command has ended, the
process ends without the interpreter's finalization (_leave), where nothing needs it.
"""

import sys


def main() -> None:
    try:
        _run()
    except SystemExit as exc:
        _leave(exc.code)
        raise
    _leave(None)


def _leave(code: object) -> None:
    """End the process now when all that is left is the interpreter's finalization: the
    atexit callbacks run, standard output and error are flushed, then os._exit. The
    finalization tears the heap down object by object (12-15 ms once typer is loaded), and
    every command waited for it. Returns, for the normal exit, where the finalization may
    still have work: a thread it would wait for, an exit code other than 0-255, a stream
    that cannot be flushed (the normal exit then says so, as ever)."""
    import atexit
    import os

    if code is None:
        code = 0
    if type(code) is not int or not 0 <= code <= 255:
        return
    threading = sys.modules.get("threading")  # not loaded (the root --help): no such thread
    if threading is not None:
        main = threading.main_thread()
        if any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate()):
            return
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    if run_exitfuncs is None:
        return
    run_exitfuncs()  # they run once: the normal exit finds none left
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except Exception:  # an OSError, or the CLI's own for standard output
        return
    os._exit(code)


def _run() -> None:
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
