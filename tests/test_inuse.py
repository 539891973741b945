"""A venv in use is named before it is changed: guard, undo, rebuild and restore see the
processes running from the venv (a live Python started from its bin/) and refuse, listing
pid and command (redacted), unless --force or the processes end within --wait."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from envguard.errors import UsageError
from envguard.inuse import InUse, check, users
from envguard.testing import make_wheel
from factories import UV, envguard_cli, make_venv, uv_freeze, uv_install

TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"


@contextlib.contextmanager
def job(venv: Path, *, seconds: float = 60, cwd: Path | None = None) -> Iterator[int]:
    """A Python started from ``venv``'s bin/ (a token on its command line), running until
    the block ends (killed by its pid) or ``seconds`` pass; yields its pid."""
    code = f"import sys, time; print(sys.prefix, flush=True); time.sleep({seconds})"
    proc = subprocess.Popen(
        [str(venv / "bin" / "python"), "-c", code, f"--hf-token={TOKEN}"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == str(venv)  # up, with the venv as sys.prefix
        yield proc.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()


def _scan(venv: Path) -> str:
    """users(venv) as a separate process sees it (the job is not its child)."""
    code = "import sys; from pathlib import Path; from envguard.inuse import users\n"
    code += "for u in users(Path(sys.argv[1])): print(u.pid, u.how, u.command, sep='|')"
    return subprocess.run(
        [sys.executable, "-c", code, str(venv)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    path = tmp_path / "venv"
    make_venv(path)
    return path


def test_a_live_python_from_the_venv_is_found_with_its_command_redacted(
    venv: Path, tmp_path: Path
) -> None:
    assert _scan(venv) == ""
    with job(venv, cwd=tmp_path) as pid:
        (line,) = _scan(venv).splitlines()
        found_pid, how, command = line.split("|")
        assert int(found_pid) == pid
        assert how == "started as the venv's interpreter"
        assert command.startswith(f"{venv}/bin/python -c import sys")
        assert TOKEN not in command and len(command) <= 100  # redacted, cut to a width
    assert _scan(venv) == ""  # ended: nothing left to name


def test_a_bare_python_found_along_the_venvs_path_counts(venv: Path, tmp_path: Path) -> None:
    """`python train.py` in a shell with the venv activated: argv[0] is a bare name, the
    program seen in /proc is the base interpreter; the job's own PATH says which python."""
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}
    proc = subprocess.Popen(
        ["python", "-c", "import time; print(1, flush=True); time.sleep(60)"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "1\n"
        assert _scan(venv).split("|")[0] == str(proc.pid)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()


def test_own_children_are_not_counted_and_force_skips_the_look(venv: Path) -> None:
    with job(venv):  # this process's child: a probe envguard runs itself is one
        assert users(venv) == []
        check(venv, InUse(), action="the test")


def test_processes_vanishing_or_unreadable_are_passed_over(tmp_path: Path) -> None:
    """A /proc-like tree: a process that ended between the listing and its reads, one
    whose stat is garbage, and one running from the venv."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    proc = tmp_path / "proc"
    for pid, stat in (("100", b"100 (gone) S 1 1"), ("200", b"garbage"), ("300", None)):
        (proc / pid).mkdir(parents=True)
        if stat is not None:
            (proc / pid / "stat").write_bytes(stat)
    (proc / "400").mkdir()
    (proc / "400" / "stat").write_bytes(b"400 (py) thon) S 1 1 1")
    (proc / "400" / "exe").symlink_to(venv / "bin" / "python")
    (proc / "400" / "cmdline").write_bytes(f"python\0-c\0pass\0--hf-token={TOKEN}\0".encode())
    (proc / "not-a-pid").mkdir()
    found = users(venv, proc=str(proc))
    assert [(u.pid, u.how, u.command) for u in found] == [
        (400, "its program is in the venv", "python -c pass --hf-token=<redacted>")
    ]


@pytest.mark.parametrize("wait", [float("nan"), float("inf"), -1.0, 1e9])
def test_a_wait_that_is_no_number_of_seconds_is_refused(wait: float) -> None:
    with pytest.raises(UsageError):
        InUse(wait=wait)


def test_wait_returns_once_the_process_ends(venv: Path) -> None:
    """Checked as another process sees it: a job that ends after a second is waited for;
    a shorter wait names it."""
    code = (
        "import sys; from pathlib import Path; from envguard.inuse import InUse, check\n"
        "check(Path(sys.argv[1]), InUse(wait=float(sys.argv[2])), action='x'); print('free')"
    )
    with job(venv, seconds=2):
        short = subprocess.run(
            [sys.executable, "-c", code, str(venv), "0.2"], capture_output=True, text=True
        )
        assert short.returncode == 1 and "ActionError" in short.stderr
        assert "in use by 1 process (waited 0.2 s)" in short.stderr
        long = subprocess.run(
            [sys.executable, "-c", code, str(venv), "30"], capture_output=True, text=True
        )
        assert long.returncode == 0 and long.stdout == "free\n", long.stderr


def test_guard_refuses_to_install_under_a_running_job(venv: Path, tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    make_wheel(wh, "six", "1.17.0")
    install = ["--", UV, "pip", "install", "--no-index", "--find-links", wh, "six"]
    with job(venv) as pid:
        refused = envguard_cli("guard", "--venv", venv, *install, cwd=tmp_path)
        assert refused.returncode == 1, refused.stderr
        first = refused.stderr.splitlines()[-2]
        prefix = (
            f"error: {venv}: in use by 1 process: pid {pid} (started as the venv's interpreter): "
        )
        assert first.startswith(prefix + f"{venv}/bin/python -c import sys")
        assert TOKEN not in refused.stderr
        assert "--wait SECONDS" in refused.stderr and "--force" in refused.stderr
        assert ("six", "1.17.0") not in uv_freeze(venv)
        os.kill(pid, 0)  # still running, its venv untouched
        forced = envguard_cli("guard", "--venv", venv, "--force", *install, cwd=tmp_path)
        assert forced.returncode == 0, forced.stderr
    assert ("six", "1.17.0") in uv_freeze(venv)


def test_undo_and_rebuild_refuse_before_building(venv: Path, tmp_path: Path) -> None:
    from envguard.guard import journal

    snap = tmp_path / "venv.json"
    made = envguard_cli("snapshot", "--python", venv / "bin" / "python", "-o", snap, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    journal.begin(venv, snap.read_text(), command=("pip", "install", "x"), allowed=(), planned="")
    wh = tmp_path / "wh"
    make_wheel(wh, "six", "1.17.0")
    uv_install(venv, wh, "six")  # since the snapshot: each command below would remove it
    marker = venv / "marker"
    marker.write_text("the venv as the job found it\n")
    with job(venv) as pid:
        for argv in (
            ("undo", "--venv", venv, "--offline"),
            ("undo", "--venv", venv, "--offline", "--in-place"),
            ("rebuild", snap, "--venv", venv, "--execute", "--offline"),
            ("rebuild", snap, "--venv", venv, "--execute", "--offline", "--in-place"),
            ("restore", snap, "--venv", venv, "--execute", "--offline"),
        ):
            refused = envguard_cli(*argv, cwd=tmp_path)
            assert refused.returncode == 1, (argv, refused.stdout, refused.stderr)
            said = refused.stderr + refused.stdout
            assert f"in use by 1 process: pid {pid} (started as the venv's interpreter): " in said
            assert TOKEN not in said
            assert marker.is_file() and ("six", "1.17.0") in uv_freeze(venv)  # untouched
            built = [
                *tmp_path.glob(".venv.envguard-build-*"),
                *tmp_path.glob(".venv.envguard-plan-*"),
            ]
            assert not built, argv  # refused before anything was built
            assert len(journal.records(venv)) == 1  # and before anything was recorded
        os.kill(pid, 0)


@pytest.mark.parametrize("wait", ["nan", "inf", "1e309", "-1"])
def test_the_wait_option_takes_only_seconds(tmp_path: Path, wait: str) -> None:
    from typer.testing import CliRunner

    from envguard.cli import app

    result = CliRunner().invoke(app, ["undo", "--venv", str(tmp_path), "--wait", wait])
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--wait" in errors[0], result.stderr
    assert "Traceback" not in result.stderr
