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
    library the CLI imports, raising what the interpreter raises on SIGINT (`list`: a
    command typer parses; the root --help and --version are written without it)."""
    fake = tmp_path / "typer"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise KeyboardInterrupt\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    proc = subprocess.run(
        [sys.executable, "-c", "from envguard.__main__ import main; main()", "list"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stderr, proc.stdout) == (130, "error: interrupted (SIGINT)\n", "")


def test_ctrl_c_before_the_signal_handlers_are_set_is_one_line() -> None:
    """A Ctrl-C while envguard imports what sets its signal handlers (a loaded machine makes
    that window milliseconds long): the interpreter raises KeyboardInterrupt there."""
    program = (
        "import builtins\n"
        "real = builtins.__import__\n"
        "def interrupted(name, *args, **kwargs):\n"
        "    if name == 'envguard.lifecycle':\n"
        "        raise KeyboardInterrupt\n"
        "    return real(name, *args, **kwargs)\n"
        "builtins.__import__ = interrupted\n"
        "from envguard.__main__ import main\n"
        "main()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", program, "list"], capture_output=True, text=True, timeout=60
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


def _restore_project(tmp_path: Path) -> Path:
    """A project whose snapshot keeps a tracked file, a compile cache and a variable; the
    file and the cache have drifted since (a restore would write all three)."""
    from factories import git

    p = tmp_path / "p"
    code = p / "code"
    code.mkdir(parents=True)
    (code / "model.py").write_text("good = 1\n")
    git(code, "init", "-q")
    git(code, "add", "-A")
    git(code, "commit", "-qm", "good")
    (p / "cache").mkdir()
    (p / "cache" / "k.bin").write_bytes(b"kernel" * 100)
    done = subprocess.run(
        [sys.executable, "-m", "envguard", "snapshot", "--python", sys.executable, "--name",
         "good", "--file", "code/model.py", "--cache", "cache", "--keep-files", "--keep-cache"],
        cwd=p, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    path = p / "snapshots" / "good.json"
    import json

    data = json.loads(path.read_text())
    data["env"] = {"NCCL_DEBUG": "INFO"}
    path.write_text(json.dumps(data))
    (code / "model.py").write_text("drifted = 1\n")
    (p / "cache" / "k.bin").write_bytes(b"other")
    return p


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_restores_package_step_stops_the_whole_restore(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """The rebuild reports its own interrupt; restore must not take it for a failed item
    and go on writing the files, the caches and the variables file after it."""
    project = _restore_project(tmp_path)
    pidfile = tmp_path / "uv.pid"
    uv = tmp_path / "slow-uv"
    uv.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "uv 0.20.0"; exit 0; fi\n'
        f"echo $$ > {pidfile}\nexec sleep 60\n"
    )
    uv.chmod(0o755)
    venv = tmp_path / "new-venv"
    proc = subprocess.Popen(
        [sys.executable, "-m", "envguard", "restore", "good", "--venv", str(venv), "--execute",
         "--no-index", "--offline", "--allow", "cache"],
        cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "ENVGUARD_UV": str(uv), "NO_COLOR": "1"},
    )  # fmt: skip
    with proc:
        deadline = time.monotonic() + 60
        while not (pidfile.exists() and pidfile.read_text().strip()):
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail(f"uv never started: {proc.communicate()[1]}")
            time.sleep(0.05)
        slow = int(pidfile.read_text())
        proc.send_signal(signum)
        try:
            out, err = proc.communicate(timeout=30)
        finally:
            proc.kill()
    assert (proc.returncode, err) == (128 + signum, f"error: interrupted ({signum.name})\n"), out
    assert (project / "code" / "model.py").read_text() == "drifted = 1\n"
    assert (project / "cache" / "k.bin").read_bytes() == b"other"
    assert not (project / "good.env.sh").exists()
    assert not venv.exists() and _gone(slow)
    left = [p.name for p in tmp_path.iterdir() if "envguard" in p.name]
    assert left == [".new-venv.envguard.lock"], left  # the lock file stays, by design


def test_an_interrupt_between_staging_and_renaming_leaves_nothing_beside(tmp_path: Path) -> None:
    """A signal once the variables file is staged: the file is not written and the staged
    copy is removed (a tracked file goes the same way)."""
    from envguard.lifecycle import Interrupted
    from envguard.probe.channel import Target
    from envguard.recovery.restore import Context, write_env_file
    from envguard.snapshots.blobs import Blobs
    from factories import snapshot

    class SignalledTarget(Target):
        def call(self, op: str, **args: object) -> dict[str, object]:
            if op == "install_file":
                raise Interrupted(signal.SIGINT)
            return super().call(op, **args)

    snap = snapshot(env={"NCCL_DEBUG": "INFO"})
    ctx = Context(
        snap=snap, live=snapshot(), target=SignalledTarget(), blobs=Blobs(tmp_path / "store"),
        execute=True,
    )  # fmt: skip
    with pytest.raises(Interrupted):
        write_env_file(ctx, str(tmp_path / "good.env.sh"))
    assert list(tmp_path.iterdir()) == []


_SIGNAL_IN_FINALIZATION = """
import os, signal, sys, time

class Late:
    def __del__(self):  # runs as the interpreter shuts down, after the handlers went
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)

import builtins
builtins._late = Late()
sys.argv = ["envguard", "--version"]
from envguard.__main__ import main
main()
"""


def test_a_signal_once_the_outcome_is_said_does_not_kill_it_silently() -> None:
    """CPython's finalization puts the default handlers back: a signal then ended the
    process by the default action (no line, no exit code of envguard's). The command is
    over by then; its said outcome and exit code stand."""
    proc = subprocess.run(
        [sys.executable, "-c", _SIGNAL_IN_FINALIZATION],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout.split()[0], proc.stderr) == (0, "envguard", "")
