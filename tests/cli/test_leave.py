"""How the console entry point ends (envguard.__main__._leave): without the interpreter's
finalization where nothing needs it, with it where something does; the exit code, the
atexit callbacks and the output the same either way."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Run before the entry point: an atexit callback that says it ran, and an object whose
# __del__ (run only by the interpreter's finalization) leaves a file.
_SET_UP = """
import atexit, sys, threading, time
_here = sys.argv[1]
atexit.register(lambda: sys.stderr.write("ATEXIT RAN\\n"))
class _Finalized:
    def __del__(self, _open=open, _here=_here):  # builtins may be gone by then
        _open(_here + "/finalized", "w").close()
_held = _Finalized()
if sys.argv[2] == "thread":
    def _late():
        time.sleep(0.5)
        open(_here + "/thread-done", "w").close()
    threading.Thread(target=_late).start()  # not a daemon: the interpreter waits for it
if sys.argv[2] == "late-output":  # written to the buffer at the very end, flushed after
    atexit.register(lambda: sys.__stdout__.write("LATE\\n"))  # past the CLI's own checks
sys.argv = ["envguard", *sys.argv[3:]]
from envguard.__main__ import main
main()
"""


# Standard output buffered, as it is without PYTHONUNBUFFERED: what is left in the buffer
# at the end is flushed there.
_BUFFERED = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def _run(tmp_path: Path, thread: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _SET_UP, str(tmp_path), thread, *argv],
        capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False, env=_BUFFERED,
    )  # fmt: skip


@pytest.mark.parametrize(("argv", "code"), [(["--version"], 0), (["show", "no-such"], 2)])
def test_a_command_ends_without_finalization_its_code_and_atexit_kept(
    tmp_path: Path, argv: list[str], code: int
) -> None:
    done = _run(tmp_path, "-", *argv)
    assert done.returncode == code
    assert done.stderr.endswith("ATEXIT RAN\n")
    assert (done.stdout != "") == (code == 0)  # the version line, flushed before the end
    assert not (tmp_path / "finalized").exists()  # the heap was not torn down


def test_a_thread_the_interpreter_would_wait_for_gets_the_normal_exit(tmp_path: Path) -> None:
    done = _run(tmp_path, "thread", "--version")
    assert done.returncode == 0 and done.stdout.startswith("envguard ")
    assert done.stderr.count("ATEXIT RAN") == 1
    assert (tmp_path / "thread-done").exists()  # waited for, as ever
    assert (tmp_path / "finalized").exists()


def test_output_that_cannot_be_flushed_at_the_end_is_one_line(tmp_path: Path) -> None:
    done = _run(tmp_path, "late-output", "--version")
    assert done.returncode == 0 and done.stdout.endswith("LATE\n")  # flushed before the end
    assert not (tmp_path / "finalized").exists()
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-c", _SET_UP, str(tmp_path), "late-output", "show", "no-such"],
            stdout=full, stderr=subprocess.PIPE, text=True, cwd=tmp_path, timeout=60,
            env=_BUFFERED,
        )  # fmt: skip
    assert done.returncode == 1 and done.stderr.count("ATEXIT RAN") == 1
    assert done.stderr.endswith("error: cannot write the output: No space left on device\n")
    assert not (tmp_path / "finalized").exists()


def test_what_quiet_put_aside_is_flushed_before_the_end(tmp_path: Path) -> None:
    """-q puts the null device in place of standard output and writes what the user asked
    for (--format json) to the stream it kept: that one is flushed too."""
    loud, quiet = (
        _run(tmp_path, "-", "log", "--format", "json"),
        _run(tmp_path, "-", "-q", "log", "--format", "json"),
    )
    assert loud.returncode == quiet.returncode == 0
    assert quiet.stdout == loud.stdout and '"envguard.log"' in quiet.stdout


def test_a_removed_working_folder_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        ["sh", "-c", 'mkdir gone && cd gone && rmdir ../gone && exec "$0" -m envguard snapshot',
         sys.executable],
        capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: the current directory no longer exists\n")
    assert "Traceback" not in done.stderr


# Said at the end of a command: whether the cyclic garbage collector runs, how much it skips.
_COLLECTOR = """
import atexit, gc, sys
atexit.register(
    lambda: sys.stderr.write("COLLECTOR %s %d\\n" % (gc.isenabled(), gc.get_freeze_count()))
)
sys.argv = ["envguard", *sys.argv[1:]]
from envguard.__main__ import main
main()
"""


def test_the_command_runs_with_the_collector_on_what_loaded_before_it_frozen(
    tmp_path: Path,
) -> None:
    """The command line's imports load with the cyclic garbage collector off; the command
    itself runs with it on (a long guard or fleet frees its cycles), the objects the imports
    made out of its walks (gc.freeze)."""
    done = subprocess.run(
        [sys.executable, "-c", _COLLECTOR, "show", "no-such"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    line = done.stderr.splitlines()[-1].split()
    assert line[:2] == ["COLLECTOR", "True"], done.stderr
    assert int(line[2]) > 10_000  # typer's objects and envguard's, frozen
