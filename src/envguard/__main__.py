"""The console entry point (``envguard`` and ``python -m envguard``).

It sits outside :mod:`envguard.cli`, before typer loads: the root ``--help`` and
``--version`` are written from help_screen; a plain ``snapshot`` or ``diff`` gets its probe
started (prestart) while typer loads, and a snapshot typer is not needed to read runs without
it (envguard.recording.run_plain); a signal while the command line's libraries are still
being imported ends like any other interrupt (one line, exit 128 + N, the early probe
stopped), and so does any other failure there (the probe stopped, the error as it is). Once
the command has ended, the process ends without the interpreter's finalization (_leave),
where nothing needs it.
"""

import sys

TYPE_CHECKING = False  # typing is not loaded for a command's start
if TYPE_CHECKING:
    from typing import TextIO


def main() -> None:
    import gc

    # The command line's start is imports: every module, function and class they make lives
    # until the process ends, and each collection walked them all again (10 ms of CPU of an
    # `envguard snapshot`, while the probe needs both cores). The collector is off while
    # they load; what loaded is then put out of its reach (gc.freeze), and it runs again
    # for the command itself (_run).
    gc.disable()
    try:
        _run()
    except SystemExit as exc:
        _leave(exc.code)
        raise
    _leave(None)


def _collect_from_now() -> None:
    """The cyclic garbage collector on again, for what the command makes from now on (main
    turned it off for the imports, which it no longer walks)."""
    import gc

    gc.freeze()
    gc.enable()


def _leave(code: object) -> None:
    """End the process now when all that is left is the interpreter's finalization: the
    atexit callbacks run, standard output and error are flushed (the streams -q put aside
    too), then os._exit. The finalization tears the heap down object by object (12-15 ms
    once typer is loaded), and every command waited for it. Returns, for the normal exit,
    where the finalization may still have work: a thread it would wait for, an exit code
    other than 0-255. Output that cannot be flushed is said as the command line says it
    during a command (_unwritten)."""
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
    streams: list[TextIO] = []  # each once: under -q, what the user asked for is in sys.__stdout__
    for stream in (sys.stdout, sys.__stdout__, sys.stderr, sys.__stderr__):
        if stream is not None and all(stream is not seen for seen in streams):
            streams.append(stream)
    for stream in streams:
        try:
            stream.flush()
        except Exception as exc:  # an OSError, or the CLI's own for standard output
            _unwritten(exc)
    os._exit(code)


def _unwritten(exc: Exception) -> None:
    """Output that could not be flushed at the end: one line and exit 1, as the command
    line says it during a command; a reader that stopped early (``| head``): nothing to
    say, exit 128 + SIGPIPE. Ends the process."""
    import os
    import signal

    if isinstance(exc, BrokenPipeError) or getattr(exc, "broken_pipe", False):
        os._exit(128 + signal.SIGPIPE)
    import contextlib

    why = getattr(exc, "strerror", None) or str(exc)
    with contextlib.suppress(OSError):  # standard error is what failed
        os.write(2, f"error: cannot write the output: {why}\n".encode())
    os._exit(1)


def _defer_imports() -> None:
    """Two modules loaded when first used, not when imported: ``inspect``, which
    dataclasses imports (with ast, dis, tokenize and linecache) and uses only to write a
    signature into a class that has no docstring, which envguard's all have; and
    ``ipaddress``, which urllib.parse (pathlib's) imports and uses only to parse a URL's
    bracketed host. Together 8 ms of the CPU a snapshot's own process spent beside its
    probe on two cores. What uses them (typer, click, pydantic) gets the real module on
    first use, through the stand-in. The command line's process only: the library never
    replaces a module."""
    if TYPE_CHECKING:
        from types import ModuleType
    else:
        ModuleType = type(sys)  # without importing types, before the probe's start

    class Deferred(ModuleType):
        def __getattr__(self, attr: str) -> object:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]  # the real one takes its place
            return getattr(__import__(self.__name__), attr)

    for name in ("inspect", "ipaddress"):
        if name not in sys.modules:
            sys.modules[name] = Deferred(name)


def _run() -> None:
    if sys.argv[1:] in (["--help"], ["--version"]):
        from envguard import help_screen
        from envguard.version import __version__

        if sys.argv[1] == "--version":  # as typer's --version says it
            text: str | None = f"envguard {__version__}\n"
        else:  # a narrower terminal gets typer's rendering
            text = help_screen.TEXT if help_screen.wide_enough() else None
        if text is not None:
            code = help_screen.write(text)
            if code:
                raise SystemExit(code)
            return
    try:
        _defer_imports()
        from envguard import prestart
        from envguard.lifecycle import handle_signals, interrupt_behind, signals_ignored_from_now
    except KeyboardInterrupt:  # Ctrl-C before the handlers are set: said as they say it
        sys.stderr.write("error: interrupted (SIGINT)\n")
        raise SystemExit(130) from None

    handle_signals()  # before any probe starts: an interrupt stops it, whenever it comes
    try:
        prestart.start(sys.argv[1:])  # the probe works while typer loads
        options = prestart.plain_snapshot(sys.argv[1:])
        if options is not None:  # typer is not loaded at all: see envguard.recording
            from envguard.recording import run_plain

            _collect_from_now()
            raise SystemExit(run_plain(options, sys.argv[1:]))
        from envguard.cli import main as cli_main

        _collect_from_now()
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
