"""What a command's run says and where its output goes, without typer: the one-line error
and its hint, -q and -v, notes, standard output whose failures end the run in one line, and
an interrupt said once. The typer program (cli/program.py) and a plain snapshot run
without it (envguard.recording) share these, so both say the same thing the same way."""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing is not loaded for a command's start
if TYPE_CHECKING:
    from typing import Any, TextIO

    from envguard.errors import EnvguardError


def say(kind: str, text: str) -> None:
    """``kind: text`` on standard error, one line: secrets redacted, control characters
    shown escaped (messages quote user input: --via, paths, hosts)."""
    from envguard.redact import redact_text
    from envguard.render.text import printable

    sys.stderr.write(f"{kind}: {printable(redact_text(text))}\n")


def report(exc: EnvguardError) -> None:
    say("error", exc.message)
    if exc.hint:
        say("hint", exc.hint)


def working_folder_gone() -> bool:
    """True, and said, when the current directory no longer exists (every command resolves
    paths against it): the run ends with exit 2."""
    import os

    try:
        os.getcwd()
    except FileNotFoundError:
        from envguard.errors import UsageError

        report(
            UsageError(
                "the current directory no longer exists",
                hint="cd to an existing directory and run the command again",
            )
        )
        return True
    return False


# Set once the interrupt was said: a later check (typer's own parsing turns an interrupt
# into exit 130 and says nothing) must not say it twice.
_SAID: list[int] = []


def begin_run() -> None:
    """A new run of the command line (a test runner or a script runs it many times in one
    process): its interrupt is not said yet."""
    _SAID.clear()


def interrupted(signum: int) -> int:
    """Stop what runs (a probe started but not yet waited for), say the interrupt once,
    with its hint (a rebuild that had already swapped in the new venv); the exit code,
    128 + N."""
    import signal

    from envguard.lifecycle import interrupt_hint, kill_running

    kill_running()
    if not _SAID:
        _SAID.append(signum)
        say("error", f"interrupted ({signal.Signals(signum).name})")
        hint = interrupt_hint()
        if hint:
            say("hint", hint)
    return 128 + signum


_QUIET: list[bool] = []
_LISTENING: list[bool] = []
# (standard output, the null device put in its place) once -q was given.
_HUSHED: list[tuple[TextIO, TextIO]] = []


def quiet() -> bool:
    """True under -q: notes and warnings are not said."""
    return bool(_QUIET)


def data_out() -> TextIO:
    """Where output the user asked for goes (``--format json``, ``--out -``, a schema, an
    export): standard output, under -q too. -q silences the chatter around it, as uv's."""
    out = sys.stdout
    for stream, sink in _HUSHED:
        if sys.stdout is sink:  # not when a test runner has put its own stdout in since
            out = stream
    if out is None:  # started with standard output closed (`>&-`)
        import errno

        raise OutputFailed(OSError(errno.EBADF, "standard output is closed"))
    return out


def note(text: str) -> None:
    """A library note (envguard.notices) as ``note: ...`` on stderr; -q keeps it quiet."""
    if not _QUIET:
        from envguard.render.text import printable

        sys.stderr.write(f"note: {printable(text)}\n")


def listen() -> None:
    """Library notes are said from now on (once per process)."""
    if not _LISTENING:
        from envguard import notices

        _LISTENING.append(True)
        notices.tell(note)


def loudness(*, quiet: bool, verbose: bool) -> None:
    """-q and -v: -q puts the null device in standard output's place (tables, "wrote ..."
    lines and rich's output go there; requested data goes to data_out()); -v turns on
    envguard.trace."""
    if verbose:
        from envguard import trace

        trace.enable()
    if quiet and not _QUIET:
        import os

        _QUIET.append(True)
        sink = open(os.devnull, "w")  # noqa: SIM115  (closed at exit: _unhush)
        if not _HUSHED:
            import atexit

            atexit.register(_unhush)
        _HUSHED.append((sys.stdout, sink))
        sys.stdout = sink


def _unhush() -> None:
    """At exit: standard output back where -q took it from (what is flushed after the
    exit callbacks, __main__._leave, is flushed there) and the null devices closed, not
    left to the interpreter's teardown (a ResourceWarning in a test run)."""
    while _HUSHED:
        stream, sink = _HUSHED.pop()
        if sys.stdout is sink:
            sys.stdout = stream
        sink.close()


def echo(text: str) -> None:
    """``text`` and a newline on standard output, as click.echo writes a line (the typer
    commands' lines): nothing when standard output is closed (``>&-``), and on a stream
    whose encoding is ASCII (a C locale) the line's UTF-8 bytes, malformed ones replaced,
    since nothing better can be told of the terminal."""
    out = sys.stdout
    if out is None:
        return
    line = text + "\n"
    buffer = getattr(out, "buffer", None)
    if buffer is not None and _ascii(getattr(out, "encoding", None)):
        try:
            out.flush()
            buffer.write(line.encode("utf-8", "replace"))
            buffer.flush()
        except OSError as exc:
            raise OutputFailed(exc) from None
        return
    out.write(line)
    out.flush()


def _ascii(encoding: str | None) -> bool:
    import codecs

    try:
        return codecs.lookup(encoding or "ascii").name == "ascii"
    except LookupError:
        return False


def guard_output() -> None:
    """Standard output from now on ends the run in one line when it cannot be written
    (Output); nothing when the process was started with it closed."""
    if sys.stdout is not None and not isinstance(sys.stdout, Output):
        sys.stdout = Output(sys.stdout)


def output_failed(exc: OutputFailed) -> int:
    """The exit code of a run whose standard output failed: a reader that stopped early
    (``envguard show | head -1``) has what it wanted, 128 + SIGPIPE and nothing said;
    else one line and 1."""
    if exc.broken_pipe:
        import os
        import signal

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)  # nothing more to flush at exit
        return 128 + signal.SIGPIPE
    say("error", f"cannot write the output: {exc}")
    return 1


class OutputFailed(Exception):
    """Standard output could not be written (a full disk, /dev/full, a closed pipe)."""

    def __init__(self, exc: OSError) -> None:
        super().__init__(exc.strerror or str(exc))
        self.broken_pipe = isinstance(exc, BrokenPipeError)


class Output:
    """Standard output whose write errors end the run with one line, not a traceback."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))
        except OSError as exc:
            raise OutputFailed(exc) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise OutputFailed(exc) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
