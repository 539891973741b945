"""Which interpreter envguard measures by default, and how the probe's answer is read."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from envguard.errors import ProbeError, UsageError
from envguard.lifecycle import running
from envguard.probe import booting, runner
from envguard.probe.interpreters import resolve_python
from envguard.probe.report import parse_report
from factories import DIST_CACHE


def fake_python(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "python3"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    return exe


def test_envguards_own_venv_is_never_the_default_target(tmp_path: Path) -> None:
    if sys.prefix == sys.base_prefix:
        pytest.skip("the tests run outside a venv: there is no own venv to skip")
    other = fake_python(tmp_path / "system-bin")
    own_bin = Path(sys.prefix) / "bin"
    environ = {"PATH": f"{own_bin}:{other.parent}"}
    assert resolve_python(None, environ=environ, cwd=tmp_path) == other
    # ... unless it is the active venv
    active = {**environ, "VIRTUAL_ENV": sys.prefix}
    assert resolve_python(None, environ=active, cwd=tmp_path).parent == own_bin


def test_order_virtual_env_then_dot_venv_then_path(tmp_path: Path) -> None:
    on_path = fake_python(tmp_path / "bin")
    dot = fake_python(tmp_path / ".venv" / "bin")
    active = fake_python(tmp_path / "active" / "bin")
    environ = {"PATH": str(on_path.parent)}
    assert (
        resolve_python(None, environ=environ, cwd=tmp_path)
        == tmp_path / ".venv" / "bin" / "python3"
    )
    assert (
        resolve_python(
            None, environ={**environ, "VIRTUAL_ENV": str(active.parent.parent)}, cwd=tmp_path
        )
        == active
    )
    dot.unlink()
    assert resolve_python(None, environ=environ, cwd=tmp_path) == on_path
    with pytest.raises(UsageError, match="no Python interpreter found"):
        resolve_python(None, environ={"PATH": ""}, cwd=tmp_path / "bin")


def test_probe_output_errors_quote_the_target() -> None:
    with pytest.raises(ProbeError, match=r"--via ssh x: failed \(exit 255\): ssh: refused"):
        parse_report(
            b"", returncode=255, stderr_tail="ssh: refused\n", label="--via ssh x", remote=True
        )
    with pytest.raises(ProbeError, match="did not answer the probe"):
        parse_report(b"hello", returncode=0, stderr_tail="", label="--python p")


@pytest.mark.parametrize("in_worker", [False, True])
@pytest.mark.parametrize("daemon", [False, True])
def test_a_signal_while_the_probe_starts_never_orphans_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_worker: bool, daemon: bool
) -> None:
    """A Ctrl-C (or CI's SIGTERM) that lands inside Popen, after the fork: the child is
    killed, not left running with its pid lost (a --via chain then outlived envguard). In
    a fleet's worker thread, the main thread's clean-up may already have run. What the
    chain started in a session of its own, its environment cleared, goes too."""
    import os
    import signal
    import subprocess
    import threading
    import time

    from envguard import lifecycle
    from envguard.lifecycle import Interrupted, on_signal, received_signal
    from envguard.probe import runner

    started: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def popen_then_signal(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        proc = real_popen(*args, **kwargs)  # type: ignore[call-overload]
        started.append(proc)
        deadline = time.monotonic() + 20
        while daemon and not pidfile.read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.02)  # the signal lands once the chain has left its daemon behind
        if in_worker:
            lifecycle.note_signal(signal.SIGTERM)  # the main thread's handler noted it
        else:
            on_signal(signal.SIGTERM, None)  # what CPython runs at the next bytecode
        return proc  # type: ignore[no-any-return]

    monkeypatch.setattr(lifecycle, "_received", [])  # this process's signals, for this test only
    monkeypatch.setattr(subprocess, "Popen", popen_then_signal)
    prefix = tmp_path / "slow-ssh"
    pidfile = tmp_path / "daemon.pid"
    pidfile.write_text("")
    leave = (
        f"setsid env -i sh -c 'echo $$ > {pidfile}; exec sleep 77' </dev/null >/dev/null 2>&1 &\n"
    )
    prefix.write_text("#!/bin/sh\n" + (leave if daemon else "") + "exec sleep 60\n")
    prefix.chmod(0o755)
    raised: list[BaseException] = []

    def start() -> None:
        try:
            runner.ProbeRun(sys.executable, {}, prefix=[str(prefix)])
        except BaseException as exc:  # what the thread ended with
            raised.append(exc)

    if in_worker:
        worker = threading.Thread(target=start)
        worker.start()
        worker.join(30)
    else:
        start()
    assert received_signal() == signal.SIGTERM
    assert len(raised) == 1 and isinstance(raised[0], Interrupted)
    (proc,) = started
    assert proc.returncode is not None, "the probe outlived the interrupt"
    assert not lifecycle.running(proc.pid)
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)
    if daemon:  # adopted (envguard is a --via chain's subreaper), killed and collected
        with pytest.raises(ProcessLookupError):
            os.kill(int(pidfile.read_text()), 0)


def test_a_reader_past_its_cap_drains_the_pipe_to_the_end() -> None:
    """Past the cap the bytes are dropped, not left in the pipe: a writer that goes on (a far
    side's process outside the killed group) is never blocked by a reader that stopped."""
    import os
    import threading

    from envguard.probe.runner import _Reader

    read_end, write_end = os.pipe()
    overflows: list[bool] = []
    pipe = os.fdopen(read_end, "rb")
    reader = _Reader(pipe, 1000, on_overflow=lambda: overflows.append(True))
    reader.start()

    def write() -> None:
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(b"x" * (4 << 20))

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    writer.join(10)
    assert not writer.is_alive(), "the writer is blocked on a pipe nobody reads"
    reader.join(10)
    pipe.close()
    assert not reader.is_alive() and reader.overflow and overflows == [True]
    assert len(reader.data) <= 1000 + 65536


def _boot(python: str) -> booting._Booted:
    booting.boot(python)
    booted = booting._BOOTS[-1]
    assert booted.proc.args[-2] == "-c"  # the boot's own command line, not `-`
    return booted


def test_a_booted_interpreter_is_taken_over_by_the_probe_of_that_interpreter() -> None:
    """The probe started before its argument is known (booting.boot) answers exactly what a
    probe started afresh answers: same interpreter, same argument, one process."""
    booted = _boot(sys.executable)
    run = runner.ProbeRun(sys.executable, {"default_caches": False, "git": False})
    try:
        assert run.proc is booted.proc and not booting._BOOTS
        report = run.result()
    finally:
        run.cancel()
    fresh = runner.ProbeRun(sys.executable, {"default_caches": False, "git": False})
    try:
        again = fresh.result()
    finally:
        fresh.cancel()
    assert fresh.proc.args[-1] == "-"  # no boot left to take: started as ever
    assert report["interpreter"] == again["interpreter"]
    assert [p["name"] for p in report["packages"]] == [p["name"] for p in again["packages"]]


@pytest.mark.skipif(sys.platform != "linux", reason="a pipe is sized by Linux's fcntl")
def test_a_boots_program_and_argument_are_in_its_pipe_before_any_thread_runs() -> None:
    """The booted program (about 200 KiB) is written into a pipe grown to hold it, and the
    argument after it, by the command's own thread: no feeder thread waits for the GIL
    while the command line imports (up to 5 ms each time a blocked write resumed)."""
    booted = _boot(sys.executable)
    assert booted.feeder is None
    run = runner.ProbeRun(sys.executable, {"default_caches": False, "git": False})
    try:
        assert run.proc is booted.proc
        assert run.proc.stdin is not None and run.proc.stdin.closed  # all of it written
        assert run.result()["packages"]
    finally:
        run.cancel()


def test_a_boot_whose_pipe_cannot_grow_is_fed_by_a_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the pipe keeps its 64 KiB (a user over the kernel's pipe limits, not Linux),
    what did not fit is written by a thread, the argument after it: the same answer."""
    import fcntl

    def refused(*args: object) -> int:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(fcntl, "fcntl", refused)
    booted = _boot(sys.executable)
    assert booted.feeder is not None
    run = runner.ProbeRun(sys.executable, {"default_caches": False, "git": False})
    try:
        assert run.proc is booted.proc
        assert run.result()["packages"]
    finally:
        run.cancel()


def test_a_boot_of_another_interpreter_is_stopped_not_used(tmp_path: Path) -> None:
    """A guess that named the interpreter otherwise (a symlink to it) is stopped and
    collected by the first probe that does not take it; that probe runs as ever."""
    other = tmp_path / "python"
    other.symlink_to(sys.executable)
    booted = _boot(str(other))
    run = runner.ProbeRun(sys.executable, {"default_caches": False, "git": False})
    try:
        assert run.proc is not booted.proc and not booting._BOOTS
        assert booted.proc.returncode is not None  # killed and collected
        assert not running(booted.proc.pid)
        assert run.result()["packages"] is not None
    finally:
        run.cancel()


def test_a_boot_no_probe_takes_ends_and_so_does_one_its_host_left() -> None:
    booted = _boot(sys.executable)
    booting.stop_boots()
    assert booted.proc.returncode is not None and not booting._BOOTS
    assert not running(booted.proc.pid)
    # The host went away without an argument: its stdin ends, and so does the boot, silent.
    left = _boot(sys.executable)
    booting._BOOTS.clear()
    try:
        if left.feeder is not None:  # the program did not fit the pipe: a thread writes it
            left.feeder.join(30)
        assert left.proc.stdin is not None
        left.proc.stdin.close()
        assert left.proc.wait(timeout=30) == 3
        assert left.proc.stdout is not None and left.proc.stderr is not None
        assert (left.proc.stdout.read(), left.proc.stderr.read()) == (b"", b"")
    finally:
        left.cancel()


def test_a_boots_first_steps_are_used_only_for_the_argument_they_were_taken_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A booted probe takes its first steps (the sites, the distribution cache, the scan)
    before its argument comes (main.begin); an argument that asks otherwise there (no
    distribution cache) gets them taken again, as it asks."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    args = {"default_caches": False, "git": False, "cache_quiet_seconds": 0}
    _boot(sys.executable)
    run = runner.ProbeRun(sys.executable, {**args, "fingerprint_cache": False})
    try:
        assert run.result()["packages"]
    finally:
        run.cancel()
    kept = tmp_path / "xdg" / DIST_CACHE
    assert not kept.exists() or not list(kept.iterdir())  # the boot's cache was not used
    _boot(sys.executable)
    run = runner.ProbeRun(sys.executable, args)
    try:
        assert run.result()["packages"]
    finally:
        run.cancel()
    assert list(kept.iterdir())  # this one asked for the cache, and got it


def test_the_first_steps_read_only_the_keys_that_decide_whether_they_are_used() -> None:
    """main.begin's steps are used when the argument's _BEGUN_BY keys read as begin's: a
    step reading another key would be taken for the wrong argument."""
    import ast
    import inspect

    from envguard.probe.payload import local_entry

    main = local_entry("main").main
    source = Path(__file__).parents[2] / "src" / "envguard" / "probe" / "target" / "main.py"
    tree = ast.parse(source.read_text())
    (begin,) = (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_begin")
    gets = [
        node.args[0].value
        for node in ast.walk(begin)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "args"
        and isinstance(node.args[0], ast.Constant)
    ]
    uses = [n for n in ast.walk(begin) if isinstance(n, ast.Name) and n.id == "args"]
    assert len(uses) == len(gets) + 1  # args.get(KEY), and _begun_by(args) that records them
    assert set(gets) == set(main._BEGUN_BY)
    assert inspect.signature(main._begin).parameters.keys() == {"args"}


def test_a_boot_older_than_a_few_seconds_is_not_taken_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a boot read first may have changed since: an old one is stopped, and the probe
    starts afresh."""
    booted = _boot(sys.executable)
    monkeypatch.setattr(booting, "BOOT_FRESH_SECONDS", 0.0)
    run = runner.ProbeRun(sys.executable, {"default_caches": False, "git": False})
    try:
        assert run.proc is not booted.proc and booted.proc.returncode is not None
        assert run.result()["packages"]
    finally:
        run.cancel()


def test_stopping_a_boot_never_waits_on_a_pipe_a_stray_holds(tmp_path: Path) -> None:
    """An interpreter that reads nothing and leaves a process in a session of its own
    holding its stdin: the boot's program (larger than the pipe) is still being written
    when the boot is stopped, and the stop returns at once all the same."""
    import os
    import shutil
    import signal
    import time

    pid_file = tmp_path / "stray.pid"
    script = tmp_path / "python"
    tools = {name: shutil.which(name) for name in ("env", "setsid", "sh", "sleep")}
    script.write_text(  # env -i: the stray does not carry the marker kill_strays looks for
        "#!/bin/sh\n"
        "exec 3<&0\n"
        f"{tools['env']} -i {tools['setsid']} {tools['sh']} -c"
        f" 'echo $$ > {pid_file}; exec {tools['sleep']} 60' <&3 &\n"
        "sleep 60\n"
    )
    script.chmod(0o755)
    booting.boot(str(script))
    deadline = time.monotonic() + 10
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    stray = int(pid_file.read_text())
    try:
        started = time.monotonic()
        booting.stop_boots()
        assert time.monotonic() - started < 3
    finally:
        os.kill(stray, signal.SIGKILL)


def test_a_key_sent_as_null_is_not_a_key_left_out() -> None:
    from envguard.probe.payload import local_entry

    main = local_entry("main").main
    assert main._begun_by({}) != main._begun_by({"fingerprint_cache": None})
    assert main._begun_by({"code": "k"}) == main._begun_by({"code": "k", "other": 1})


def test_the_probe_runs_without_the_cyclic_collector_and_the_rank_gate_keeps_its_own() -> None:
    """A probe's own process (as a snapshot sends it its program, as it boots one early, and
    as a fleet's engine runs the standalone script) turns the cyclic garbage collector off:
    each collection walked all it had read again. The rank gate loads the probe's modules
    into the training process itself, whose collector stays as it was."""
    import gc
    import subprocess
    import sys

    from envguard.probe import payload
    from envguard.probe.booting import BOOT

    said = "sys.stderr.write('COLLECTOR %s\\n' % __import__('gc').isenabled())\n"
    args = {"verify": "off", "git": False, "files": [], "caches": [], "env": False}
    length, _, booting = payload.booting_payload().decode("utf-8").partition("\n")
    sources = booting[int(length) :]  # the packed sources' length line and text
    booted = payload.probe_argument(args, "main")
    started = {
        "sent": (["-"], payload.probe_payload(args), ""),
        "booted": (["-c", BOOT], booting[: int(length)], sources + booted),
        "standalone": (["-"], payload.standalone_payload(args), ""),
    }
    for how, (argv, program, after) in started.items():
        at = program.index("\n", program.index("_pkg = _envguard_install(")) + 1
        program = program[:at] + said + program[at:]
        if how == "booted":  # its length line first, the sources and argument after it
            program = f"{len(program.encode('utf-8'))}\n{program}"
        done = subprocess.run(
            [sys.executable, "-I", "-S", *argv],
            input=program + after,
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, (how, done.stderr)
        assert "COLLECTOR False\n" in done.stderr, how
    assert gc.isenabled()
    payload.local_entry("main")
    assert gc.isenabled()


@pytest.mark.parametrize(("code", "taken"), [(0, True), (3, False)])
def test_a_report_read_before_its_interpreter_ended_counts_by_its_exit(
    tmp_path: Path, code: int, taken: bool
) -> None:
    """The probe closes its stdout once its report is written, and the report is read
    while the process still ends: what counts is still its exit. A report followed by an
    exit other than 0 (an interpreter that crashed on its way out, a fake) is refused."""
    import json

    from factories import real_report

    report = tmp_path / "report.json"
    report.write_text(json.dumps(real_report()))
    fake = tmp_path / "python3"
    fake.write_text(
        f"#!/bin/sh\ncat {report}\nexec 1>&-\nsleep 0.3\nexit {code}\n"
    )  # stdout ends well before the process does
    fake.chmod(0o755)
    run = runner.ProbeRun(str(fake), {"default_caches": False})

    def then(report: Any) -> tuple[int | None, int]:
        """What follows the report (the snapshot's document) runs while the process ends."""
        return run.proc.poll(), len(report["packages"])

    try:
        if taken:
            still, count = run.result_then(then)
            assert still is None and count > 0  # made before the process had ended
        else:
            with pytest.raises(ProbeError, match="not a working Python interpreter"):
                run.result_then(then)
    finally:
        run.cancel()


_MATCHED = """
import sys
order = []

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "subprocess":
            order.append("subprocess imported")
        return None

sys.meta_path.insert(0, Watch())
from envguard.probe import booting, runner

reap = runner.ProbeRun._reap
def _reap(self):
    order.append("probe stopped")
    return reap(self)
runner.ProbeRun._reap = _reap
booting.boot(sys.argv[1])
run = runner.ProbeRun(sys.argv[1], {"default_caches": False})
def then(report):
    raise KeyboardInterrupt  # what a signal raises while the report is read
try:
    run.result_then(then)
except KeyboardInterrupt:
    order.append("interrupted")
print(order[:2], run.proc.returncode is not None)
"""


def test_an_interrupt_while_the_probe_ends_stops_it_before_anything_is_imported(
    tmp_path: Path,
) -> None:
    """The exception an interrupt raises is matched without importing subprocess (whose
    TimeoutExpired it is not): an import there could be cut by a second signal, past the
    clean-up, leaving the probe running and the command waiting for it."""
    import json
    import subprocess

    from factories import real_report

    report = tmp_path / "report.json"
    report.write_text(json.dumps(real_report()))
    fake = tmp_path / "python3"
    fake.write_text(f"#!/bin/sh\ncat {report}\nexec 1>&-\nexec sleep 30\n")
    fake.chmod(0o755)
    out = subprocess.run(
        [sys.executable, "-c", _MATCHED, str(fake)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['probe stopped', 'interrupted'] True"
