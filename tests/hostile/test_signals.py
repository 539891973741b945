"""SIGTERM and SIGHUP stop envguard like Ctrl-C: the probe chain killed, one line, 128+N."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _gone(pid: int, within: float = 5.0) -> bool:
    """``pid`` ended (a zombie counts: once pytest was made a subreaper by an earlier --via
    test, a killed orphan waits there, dead, for a parent that never collects it)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except (ProcessLookupError, FileNotFoundError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_kills_the_remote_chain_and_exits_with_one_line(
    tmp_path: Path, signum: signal.Signals
) -> None:
    pidfile = tmp_path / "pid"
    prefix = tmp_path / "slow-ssh"
    prefix.write_text(f"#!/bin/sh\necho $$ > {pidfile}\nexec sleep 60\n")
    prefix.chmod(0o755)
    proc = subprocess.Popen(
        [sys.executable, "-m", "envguard", "snapshot", "--via", str(prefix), "--out", "-"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with proc:  # on a failure too: no envguard left running into the next test
        deadline = time.monotonic() + 20
        while (
            not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        remote = int(pidfile.read_text())
        proc.send_signal(signum)
        try:
            out, err = proc.communicate(timeout=20)
        finally:
            proc.kill()
    assert proc.returncode == 128 + signum, err
    assert err.strip() == f"error: interrupted ({signum.name})" and out == ""
    assert _gone(remote), "the --via chain outlived envguard"


def test_ctrl_c_while_the_command_line_is_still_importing_is_one_line(tmp_path: Path) -> None:
    """A Ctrl-C during the first imports (before main() runs): typer stands in here for any
    library the CLI imports, raising what the interpreter raises on SIGINT."""
    fake = tmp_path / "typer"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise KeyboardInterrupt\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    proc = subprocess.run(
        [sys.executable, "-c", "from envguard.__main__ import main; main()", "--version"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stderr, proc.stdout) == (130, "error: interrupted (SIGINT)\n", "")


@pytest.mark.parametrize("how", [pytest.param("timeout", marks=pytest.mark.slow), "signal"])
@pytest.mark.parametrize("clear_env", [False, True])
def test_a_via_that_daemonises_in_its_own_session_is_killed_too(
    tmp_path: Path, how: str, clear_env: bool
) -> None:
    """setsid puts the child outside the probe's process group; the marker in its
    environment still finds it, and with the environment cleared (env -i) envguard, a
    subreaper, adopts it when its parent dies: on a timeout and on a signal."""
    pidfile = tmp_path / "daemon.pid"
    prefix = tmp_path / "daemonising-ssh"
    env_i = "env -i " if clear_env else ""
    prefix.write_text(
        "#!/bin/sh\n"
        f"setsid {env_i}sh -c 'echo $$ > {pidfile}; exec sleep 120' </dev/null >/dev/null 2>&1 &\n"
        "exec sleep 60\n"
    )
    prefix.chmod(0o755)
    argv = [sys.executable, "-m", "envguard", "snapshot", "--via", str(prefix), "--out", "-"]
    if how == "timeout":
        argv += ["--timeout", "5"]  # the prefix starts its daemon well within it
    proc = subprocess.Popen(
        argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    with proc:
        deadline = time.monotonic() + 20
        while (
            not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        daemon = int(pidfile.read_text())
        if how == "signal":
            proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=30)
        finally:
            proc.kill()
    assert proc.returncode in (2, 1, 128 + signal.SIGTERM) and out == "", err
    assert len(err.strip().splitlines()) <= 2, err
    assert _gone(daemon), "a daemonised child of the --via prefix outlived envguard"


_LOST_SIGNAL = """
import os, signal, sys, weakref
from envguard.probe import runner

started = runner.ProbeRun.__init__

def start_then_lose_a_signal(self, *args, **kwargs):
    started(self, *args, **kwargs)
    class Gone: pass
    def callback(_):  # the handler runs here, and CPython drops what it raises
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100000): pass
    thing = Gone()
    ref = weakref.ref(thing, callback)
    del thing

runner.ProbeRun.__init__ = start_then_lose_a_signal
sys.argv = ["envguard", *sys.argv[1:]]
from envguard.__main__ import main
main()
"""


def test_a_signal_whose_exception_python_lost_still_stops_the_wait(tmp_path: Path) -> None:
    """The handler's exception, raised inside a weakref callback (importlib's module locks
    have one), is dropped by CPython: the probe's wait still sees the signal and stops."""
    pidfile = tmp_path / "pid"
    prefix = tmp_path / "slow-ssh"
    prefix.write_text(f"#!/bin/sh\necho $$ > {pidfile}\nexec sleep 60\n")
    prefix.chmod(0o755)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", _LOST_SIGNAL, "snapshot", "--via", str(prefix), "--out", "-"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert time.monotonic() - started < 15
    assert (proc.returncode, proc.stderr, proc.stdout) == (
        128 + signal.SIGTERM,
        "error: interrupted (SIGTERM)\n",
        "",
    )
    if pidfile.exists() and pidfile.read_text().strip():
        assert _gone(int(pidfile.read_text())), "the --via chain outlived envguard"


@pytest.mark.parametrize("clear", [False, True], ids=["setsid", "setsid-env-i"])
def test_a_bisect_check_that_daemonises_in_its_own_session_is_killed(
    tmp_path: Path, clear: bool
) -> None:
    """A check (a training script that starts a data server) leaves a process in a session
    of its own, also with its environment cleared: it does not outlive the check's run."""
    from envguard.recovery.bisect import Check, run_check

    pidfile = tmp_path / "daemon.pid"
    prefix = "'env', '-i', " if clear else ""
    script = tmp_path / "check.py"
    script.write_text(
        "import subprocess, time\n"
        f"subprocess.Popen([{prefix}'/bin/sh', '-c', 'echo $$ > {pidfile}; exec sleep 60'],"
        " start_new_session=True)\n"
        f"while not open({str(pidfile)!r}, 'a+').tell(): time.sleep(0.01)\n"
        "print('tok_s=21500')\n"
    )
    check = Check(argv=(sys.executable, str(script)), timeout=30)
    code, _out = run_check(check, Path(sys.prefix), dict(os.environ), tmp_path)
    assert code == 0
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the check's daemon outlived it")
