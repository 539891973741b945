"""The user's command as bisect's judge: how it is given (--run, --shell, --metric,
--min/--max), how one run of it is started and bounded, and what its exit status or
printed metric says (good, bad or skip, as git bisect's)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from envguard.errors import UsageError
from envguard.lifecycle import MARKER, end_chain, forget, new_marker, start_child

Result = Literal["good", "bad", "skip"]

# The command could not run at all here: an import error, or no such script (a commit
# from before the benchmark existed). Judged as git bisect's "skip", unless the bad
# environment itself fails that way (then the crash is what is being hunted).
_IMPORT_ERROR = re.compile(r"^(?:ModuleNotFoundError|ImportError)\b.*$", re.M)
_NO_SCRIPT = re.compile(r"can't open file")
# A value as float() reads it, infinities and NaN included (judge() calls them bad).
_METRIC_LINE = re.compile(
    r"^\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*[=:]\s*([+-]?(?:[0-9][0-9.eE+-]*|inf|infinity|nan))\s*$",
    re.IGNORECASE,
)


def metric_value(output: str, name: str) -> float | None:
    """The last ``NAME=value`` (or ``NAME: value``) line, or NAME in the last JSON object
    on a line of its own, in ``output``."""
    found: float | None = None
    for line in output.splitlines():
        text = line.strip()
        if text.startswith("{") and text.endswith("}"):
            try:
                value = json.loads(text).get(name)
            except (ValueError, AttributeError, RecursionError):
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                try:
                    found = float(value)
                except OverflowError:  # an int past float's range: an infinity, judged bad
                    found = math.inf if value > 0 else -math.inf
            continue
        match = _METRIC_LINE.match(text)
        if match and match.group(1) == name:
            try:
                found = float(match.group(2))
            except ValueError:
                continue
    return found


@dataclass(frozen=True)
class Check:
    """How the user's command judges an environment."""

    argv: tuple[str, ...]
    timeout: float = 600.0
    metric: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    import_error_bad: bool = False  # set once the bad environment itself crashes on import


@dataclass(frozen=True)
class Verdict:
    """What one run of the check said: the result, the metric, and why when skipped (or
    the import error that made it bad)."""

    result: Result
    metric: float | None = None
    why: str | None = None


def judge(check: Check, code: int | None, output: str) -> Verdict:
    """good/bad by the exit status or the metric; skip when the command could not start,
    hit an import error (bad once ``import_error_bad``), timed out, exited 125 (git
    bisect's skip) or printed no metric."""
    if code is None:
        return Verdict("skip", why=output or "could not start")
    if code == 125:
        return Verdict("skip", why="exit 125")
    if _NO_SCRIPT.search(output):
        return Verdict("skip", why="no such script")
    crash = _IMPORT_ERROR.findall(output)
    if crash and code != 0:
        why = crash[-1].strip()[:200]
        return Verdict("bad" if check.import_error_bad else "skip", why=why)
    if check.metric is None:
        return Verdict("good" if code == 0 else "bad")
    value = metric_value(output, check.metric)
    if code != 0:
        return Verdict("bad", value, why=f"exit {code}")
    if value is None:
        return Verdict("skip", why=f"printed no {check.metric}")
    if not math.isfinite(value):
        # NaN (a loss that went NaN is the classic regression) or an infinity (a throughput
        # timed over zero seconds, 1e309): no measurement, whichever bound is set.
        return Verdict("bad", why=f"{check.metric} is {'NaN' if value != value else value}")
    if check.minimum is not None and value < check.minimum:
        return Verdict("bad", value)
    if check.maximum is not None and value > check.maximum:
        return Verdict("bad", value)
    return Verdict("good", value)


_OUTPUT_TAIL = 1 << 20


def run_check(check: Check, venv: Path, env: dict[str, str], cwd: Path) -> tuple[int | None, str]:
    """Run the command in ``venv`` (its bin first on PATH); (exit code or None, output).

    Output goes to a temporary file, not a pipe: a child the check left running (in a
    session of its own) could hold a pipe open for ever; the wait is for the process.
    When it ends, whatever it started goes too: its group, processes that carry its marker
    variable, and orphans envguard adopted as their subreaper (a daemon that left the
    session and cleared its environment; Linux). Only the last MiB of output is read."""
    import tempfile

    token, marker = new_marker()
    full = {
        **env,
        MARKER: token,
        "VIRTUAL_ENV": str(venv),
        "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', os.defpath)}",
    }
    with tempfile.TemporaryFile() as out:
        try:
            proc = start_child(
                list(check.argv),
                marker=marker,
                adopts=True,
                cwd=cwd,
                env=full,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        except OSError:
            return None, ""
        try:
            code: int | None = proc.wait(timeout=check.timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:  # also on Ctrl-C: the check and all it started go, in any session
            end_chain(proc, marker=marker, adopts=True)
            forget(proc.pid)
        size = out.seek(0, os.SEEK_END)
        out.seek(max(0, size - _OUTPUT_TAIL))
        text = out.read().decode("utf-8", "replace")
    return code, text if code is not None else "timed out"


def crashed_on_import(why: str) -> bool:
    """Whether a skip's reason is an import error (the crash a bad environment can be)."""
    return _IMPORT_ERROR.match(why) is not None


_OPERATORS = frozenset({"|", "||", "&&", ";", "&", ">", ">>", "<", "<<", "2>", "2>&1", "&>"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def _shell_syntax(argv: Sequence[str]) -> str | None:
    """The first word of ``argv`` that only a shell would understand (a pipe, a
    redirection, ``$(...)``, a leading ``VAR=value``), or None."""
    if _ASSIGNMENT.match(argv[0]):
        return argv[0].split("=", 1)[0] + "=..."
    for word in argv:
        if word in _OPERATORS or word.startswith((">", "2>", "$(", "`")) or word.endswith(";"):
            return word
    return None


def check_from(
    run: str, *, shell: bool, timeout: float, metric: str | None,
    minimum: float | None, maximum: float | None,
) -> Check:  # fmt: skip
    """The Check for --run (no shell unless --shell), --metric and --min/--max."""
    from envguard.tools import split_command

    if (minimum is not None or maximum is not None) and metric is None:
        raise UsageError("--min/--max need --metric NAME")
    if metric is not None and minimum is None and maximum is None:
        raise UsageError(f"--metric {metric}: say what is good with --min X or --max X")
    argv = ("sh", "-c", run) if shell else split_command(run, option="--run")
    if not shell:
        syntax = _shell_syntax(argv)
        if syntax:
            raise UsageError(
                f"--run: {syntax!r} is shell syntax, and the command runs without a shell",
                hint="pass --shell to run it through sh -c",
            )
    if not 0 < timeout <= 1e6:  # also NaN and infinity
        raise UsageError(f"--timeout {timeout:g}: seconds, more than 0 and at most 1e6")
    for option, value in (("--min", minimum), ("--max", maximum)):
        if value is not None and value != value:
            raise UsageError(f"{option} nan: a number")
    return Check(argv=tuple(argv), timeout=timeout, metric=metric, minimum=minimum, maximum=maximum)
