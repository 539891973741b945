"""Find the target interpreter and run the probe inside it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from envguard.errors import ProbeError, UsageError

PROBE_TOO_OLD = 3
# The whole probe travels on stdin as one program: a version check in syntax that any Python
# parses, then the probe's source and arguments as string literals. The command line is only
# `python -I -`, so it survives any prefix unquoted: ssh's remote shell, docker exec, srun.
_PAYLOAD = (
    "import sys\n"
    "if sys.version_info < (3, 8):\n"
    "    sys.stderr.write('envguard-probe: Python %d.%d is too old\\n' % sys.version_info[:2])\n"
    f"    sys.exit({PROBE_TOO_OLD})\n"
    "sys.argv = ['envguard-probe', {args!r}]\n"
    "exec(compile({source!r}, '<envguard-probe>', 'exec'), {{'__name__': '__main__'}})\n"
)
# Probes running now (their process group ids), so an interrupt can stop them all.
_RUNNING: set[int] = set()
_RUNNING_LOCK = threading.Lock()


def kill_running() -> None:
    """Kill every probe still running (and whatever its prefix started): Ctrl-C on a fleet."""
    with _RUNNING_LOCK:
        groups = list(_RUNNING)
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


# What a remote interpreter path may contain: it may pass through a remote shell unquoted.
_SAFE_PYTHON = re.compile(r"^[A-Za-z0-9_./+-]+$")


@cache
def probe_source() -> str:
    """The probe's source text, as sent to the target interpreter."""
    return Path(__file__).with_name("script.py").read_text(encoding="utf-8")


def venv_python(venv: Path) -> Path | None:
    """The interpreter of a venv directory, or None when it holds none."""
    for rel in ("bin/python", "bin/python3", "Scripts/python.exe"):
        candidate = venv / rel
        if candidate.exists():
            return candidate
    return None


def _own_venv() -> Path | None:
    """envguard's own venv (a tool install), unless it is a plain interpreter."""
    return Path(sys.prefix).resolve() if sys.prefix != sys.base_prefix else None


def resolve_python(
    python: str | None, *, environ: Mapping[str, str] | None = None, cwd: Path | None = None
) -> Path:
    """The interpreter to measure: --python, else $VIRTUAL_ENV, ./.venv, python3 on PATH."""
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    if python:
        path = Path(python).expanduser()
        if not path.is_absolute():
            path = cwd / path
        if not os.path.lexists(path):
            raise UsageError(f"--python {python}: no such file or directory")
        if path.is_dir():
            found = venv_python(path)
            if found is None:
                raise UsageError(
                    f"--python {python}: directory holds no bin/python (not a virtualenv)"
                )
            return found
        return path
    if environ.get("VIRTUAL_ENV"):
        found = venv_python(Path(environ["VIRTUAL_ENV"]))
        if found is not None:
            return found
    local = venv_python(cwd / ".venv")
    if local is not None:
        return local
    own = _own_venv()
    for entry in environ.get("PATH", "").split(os.pathsep):
        candidate = shutil.which("python3", path=entry) if entry else None
        if candidate is None:
            continue
        # The folder, resolved; not the file: a venv's python links out to its base Python.
        if own is not None and Path(candidate).parent.resolve().is_relative_to(own):
            continue
        return Path(candidate)
    raise UsageError(
        "no Python interpreter found to measure",
        hint="pass --python PATH (an interpreter or a venv directory)",
    )


_PYTHON_NAME = re.compile(r"^(python|pypy)[0-9.]*$")


def recorded_python(
    executable: str,
    *,
    remote: bool = False,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Path:
    """The interpreter a snapshot names, if it is safe to run without the user naming it.

    A snapshot may come from a pull request, so the path it records must look like a
    Python, and locally must not lie inside the current directory (a checkout an attacker
    could fill) unless it is the interpreter envguard would pick by default anyway.
    """
    path = Path(executable)
    hint = "pass --python PATH to say which interpreter to measure"
    if (
        not path.is_absolute()
        or not _PYTHON_NAME.match(path.name)
        or ".." in path.parts
        or path.parts[1:2] == ("proc",)
    ):
        raise UsageError(
            f"{executable!r}: the snapshot's interpreter is not a plain python path", hint=hint
        )
    if remote:
        return path
    if not path.exists():
        raise UsageError(f"{path}: the snapshot's interpreter no longer exists", hint=hint)
    cwd = (Path.cwd() if cwd is None else cwd).absolute()
    # The places a checkout (a pull request) can fill: this directory and its git work tree,
    # compared on resolved paths so a symlinked spelling cannot slip past.
    roots = {os.path.realpath(cwd)}
    from envguard.capture.repos import find_work_tree

    top = find_work_tree(cwd)
    if top is not None:
        roots.add(os.path.realpath(top))
    spellings = {os.path.normpath(os.path.abspath(path)), os.path.realpath(path)}
    inside = any(s == r or s.startswith(r.rstrip("/") + "/") for s in spellings for r in roots)
    if inside:
        try:
            default = resolve_python(None, environ=environ, cwd=cwd)
        except UsageError:
            default = None
        if default is None or os.path.normpath(os.path.abspath(default)) != os.path.normpath(
            os.path.abspath(path)
        ):
            raise UsageError(
                f"{path}: the snapshot names an interpreter inside this checkout",
                hint=f"pass --python {path} if you trust it",
            )
    return path


def probe_payload(args: Mapping[str, Any]) -> str:
    """The program sent on stdin: version check, then the probe with its arguments."""
    return _PAYLOAD.format(args=json.dumps(dict(args), sort_keys=True), source=probe_source())


def probe_argv(python: str, *, prefix: Sequence[str] = ()) -> list[str]:
    """The argv that runs the probe (behind ``prefix`` when remote); the program is stdin."""
    if prefix and (not _SAFE_PYTHON.match(python) or python.startswith("-")):
        raise UsageError(f"--python {python!r}: a remote interpreter path must be a plain path")
    return [*prefix, python, "-I", "-"]


class ProbeRun:
    """A probe started in the background, so it works while envguard imports its own heavy
    modules; ``result()`` waits for its report (or raises ProbeError)."""

    def __init__(
        self,
        python: Path | str,
        args: Mapping[str, Any],
        *,
        label: str | None = None,
        prefix: Sequence[str] = (),
        timeout: float | None = None,
    ) -> None:
        self.label = label or (f"--via {shlex.join(prefix)}" if prefix else f"--python {python}")
        self.remote = bool(prefix)
        self.timeout = timeout
        argv = probe_argv(str(python), prefix=prefix)
        try:
            # Its own session, so a timeout kills the whole chain (ssh, pct exec, ...) at once.
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",  # an ssh banner or a shell error need not be UTF-8
                start_new_session=True,
            )
        except OSError as exc:
            what = "the prefix" if prefix else "it as a Python interpreter"
            raise ProbeError(f"{self.label}: cannot run {what} ({exc.strerror or exc})") from None
        with _RUNNING_LOCK:
            _RUNNING.add(self.proc.pid)
        self._feeder = threading.Thread(target=self._feed, args=(probe_payload(args),), daemon=True)
        self._feeder.start()

    def _feed(self, payload: str) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            stdin.write(payload)
        except (OSError, ValueError):
            pass  # the target ended early: result() reports what it said
        finally:
            with contextlib.suppress(OSError, ValueError):
                stdin.close()

    def _kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def cancel(self) -> None:
        """Stop the probe: its result is no longer wanted (a no-op once it was collected)."""
        if self.proc.returncode is not None:
            return  # reaped already: its pid may belong to someone else now
        try:
            self._feeder.join(1)
            self.proc.stdin = None  # the feeder owns and closes it
            self._reap()
        except (OSError, ValueError):
            pass  # the caller is already on its way out with the error that matters
        finally:
            with _RUNNING_LOCK:
                _RUNNING.discard(self.proc.pid)

    def _reap(self) -> None:
        """Kill the probe's group and collect it, never waiting long on inherited pipes."""
        self._kill()
        try:
            self.proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # a descendant in another session holds the pipes
            for pipe in (self.proc.stdout, self.proc.stderr):
                if pipe is not None:
                    pipe.close()
            self.proc.wait()

    def result(self) -> dict[str, Any]:
        """Wait for the report; ProbeError quoting the target's own last line."""
        proc = self.proc
        try:
            self._feeder.join(self.timeout)
            if self._feeder.is_alive():
                raise subprocess.TimeoutExpired(proc.args, self.timeout or 0)
            proc.stdin = None  # fed and closed by the feeder
            stdout, stderr = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self._reap()
            raise ProbeError(f"{self.label}: no answer within {self.timeout:g}s") from None
        except BaseException:
            self._reap()
            raise
        finally:
            with _RUNNING_LOCK:
                _RUNNING.discard(proc.pid)
        return parse_probe_output(
            proc.returncode, stdout, stderr, label=self.label, remote=self.remote
        )


def run_probe(
    python: Path | str,
    args: Mapping[str, Any],
    *,
    label: str | None = None,
    prefix: Sequence[str] = (),
    timeout: float | None = None,
) -> dict[str, Any]:
    """Run the probe in ``python`` (through ``prefix``) and return its report, or ProbeError."""
    return ProbeRun(python, args, label=label, prefix=prefix, timeout=timeout).result()


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def parse_probe_output(
    returncode: int, stdout: str, stderr: str, *, label: str, remote: bool = False
) -> dict[str, Any]:
    """The probe's JSON report, or a ProbeError that quotes the target's own last line."""
    if returncode == PROBE_TOO_OLD and "too old" in stderr:
        raise ProbeError(
            f"{label}: {_last_line(stderr).removeprefix('envguard-probe: ')}"
            "; envguard needs Python 3.8 or newer there"
        )
    if returncode != 0:
        what = f"failed (exit {returncode})" if remote else "not a working Python interpreter"
        raise ProbeError(f"{label}: {what}: {_last_line(stderr)}")
    try:
        report = json.loads(stdout)
    except ValueError:
        raise ProbeError(
            f"{label}: not a Python interpreter (it did not answer the probe)"
        ) from None
    if not isinstance(report, dict) or "packages" not in report:
        raise ProbeError(f"{label}: not a Python interpreter (it did not answer the probe)")
    return report
