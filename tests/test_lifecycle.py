"""Signals and children: a signal noted, raised at the next wait, held where a child is
being started, and not ignored by one thread because another cleans up; a probe started
while its input is validated is stopped when the input is not valid."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envguard import lifecycle
from envguard.errors import ProbeError, UsageError
from envguard.probe.runner import ProbeRun


def test_one_threads_clean_up_does_not_let_another_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After Ctrl-C, a thread removing a far side's staged file waits in cleaning_up();
    another thread (a fleet's worker) must still stop at its next wait, not start and wait
    for remote work for up to 30 s."""
    monkeypatch.setattr(lifecycle, "_received", [])
    lifecycle.note_signal(signal.SIGINT)
    inside, done = threading.Event(), threading.Event()
    seen: list[BaseException | None] = []

    def clean_up() -> None:
        with lifecycle.cleaning_up():
            lifecycle.raise_if_signalled()  # this thread's clean-up goes on
            inside.set()
            done.wait(10)

    def worker() -> None:
        inside.wait(10)
        try:
            lifecycle.raise_if_signalled()
            seen.append(None)
        except lifecycle.Interrupted as exc:
            seen.append(exc)

    threads = [threading.Thread(target=clean_up), threading.Thread(target=worker)]
    for thread in threads:
        thread.start()
    threads[1].join(10)
    done.set()
    threads[0].join(10)
    assert len(seen) == 1 and isinstance(seen[0], lifecycle.Interrupted)


def test_a_signal_inside_a_deferred_block_is_raised_when_it_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lifecycle, "_received", [])
    reached = []
    with pytest.raises(lifecycle.Interrupted) as raised, lifecycle.signals_deferred():
        lifecycle.on_signal(signal.SIGTERM, None)  # noted, not raised here
        reached.append("after the signal")
    assert reached == ["after the signal"] and raised.value.signum == signal.SIGTERM


def test_a_signal_the_process_was_started_ignoring_stays_ignored() -> None:
    """`nohup envguard ...` ignores SIGHUP: a closed terminal must not stop a rebuild or a
    capture; envguard does not turn the signal back on."""
    import subprocess
    import sys

    program = (
        "import os, signal\n"
        "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
        "from envguard import lifecycle\n"
        "lifecycle.handle_signals()\n"
        "os.kill(os.getpid(), signal.SIGHUP)\n"
        "sum(range(1000))\n"
        "print(lifecycle.received_signal(), signal.SIGINT in lifecycle.catchable_signals())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "None True\n", "")


def _slow_probe(tmp_path: Path) -> ProbeRun:
    """A probe whose interpreter never answers (it sleeps)."""
    slow = tmp_path / "python3"
    slow.write_text("#!/bin/sh\nexec sleep 60\n")
    slow.chmod(0o755)
    return ProbeRun(slow, {})


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("failure", [UsageError("not a snapshot"), KeyboardInterrupt()])
def test_an_invalid_input_or_an_interrupt_meanwhile_stops_the_probe(
    tmp_path: Path, failure: BaseException
) -> None:
    """The probe started before its input was validated is gone, not left running, once
    the validation fails or is interrupted."""
    started: list[ProbeRun] = []

    def start() -> ProbeRun:
        started.append(_slow_probe(tmp_path))
        return started[-1]

    def validate() -> None:
        raise failure

    with pytest.raises(type(failure)):
        lifecycle.validate_meanwhile(
            start, validate, start_valid=lambda _: start(), finish=ProbeRun.result
        )
    (probe,) = started
    assert probe.proc.returncode is not None and _gone(probe.proc.pid)
    assert not lifecycle.running(probe.proc.pid)


def test_the_inputs_own_error_comes_before_one_starting_early(tmp_path: Path) -> None:
    """A probe that could not start early (no such interpreter) is not the error to report
    when the input itself is invalid; with a valid input, it is."""

    def start() -> ProbeRun:
        raise ProbeError("cannot run it")

    def invalid() -> None:
        raise UsageError("not a snapshot")

    def never(_: object) -> ProbeRun:
        raise AssertionError("started again")

    with pytest.raises(UsageError, match="not a snapshot"):
        lifecycle.validate_meanwhile(start, invalid, start_valid=never, finish=ProbeRun.result)
    with pytest.raises(ProbeError, match="cannot run it"):
        lifecycle.validate_meanwhile(start, lambda: None, start_valid=never, finish=ProbeRun.result)


def test_an_input_valid_first_starts_the_work_then(tmp_path: Path) -> None:
    """Work that may start only once the input is valid starts from the valid value, and
    its result comes back beside it."""
    probe = tmp_path / "python3"
    probe.write_text("#!/bin/sh\ncat >/dev/null; printf done\n")
    probe.chmod(0o755)
    valid, (out, _err) = lifecycle.validate_meanwhile(
        lambda: None,
        lambda: "valid",
        start_valid=lambda value: ProbeRun(probe, {"value": value}),
        finish=ProbeRun.output,
    )
    assert (valid, out) == ("valid", b"done")


def test_an_api_callers_rebuild_is_interrupted_by_sigterm_and_leaves_no_trace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the CLI's handlers, the block turns SIGTERM into Interrupted (a rebuild
    cleans up); afterwards the caller's handler is back, and the interrupt the block
    reported does not stop the caller's next call."""
    monkeypatch.setattr(lifecycle, "_received", [])
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(lifecycle.Interrupted) as raised, lifecycle.signals_handled():
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(1000))  # the handler runs here
    assert raised.value.name == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before
    assert lifecycle.received_signal() is None
    lifecycle.raise_if_signalled()


def _spawned(*argv: str) -> lifecycle.Spawned:
    _, marker = lifecycle.new_marker()
    child = lifecycle.spawn_piped(list(argv), marker=marker, env={**os.environ})
    assert child is not None  # Linux: the early probe's start imports no subprocess
    return child


def test_a_spawned_child_is_started_as_start_child_starts_one(tmp_path: Path) -> None:
    """spawn_piped() (the early probe's start): a session of its own, registered, its three
    pipes and nothing else of envguard's (an inheritable descriptor it was given stays
    behind, as close_fds does), SIGPIPE at its default (a child that writes to a closed pipe
    dies of it, as under Popen), and Popen's answers to wait() and poll()."""
    import shutil

    if not hasattr(os, "posix_spawn") or not Path("/proc/self/fd").is_dir():
        pytest.skip("spawn_piped is the Linux start")
    held = os.open(tmp_path / "held", os.O_CREAT | os.O_WRONLY)
    inherited = os.dup2(held, 77)  # inheritable, as a parent's descriptor may be
    os.close(held)
    script = (
        "read line; echo \"$line\"; echo $(ls /proc/$$/fd); echo $$ $(cut -d' ' -f6 /proc/$$/stat);"
        " grep SigIgn /proc/$$/status; echo said >&2"
    )
    try:
        child = _spawned(str(shutil.which("sh")), "-c", script)
    finally:
        os.close(inherited)
    assert lifecycle.running(child.pid) and child.poll() is None
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    child.stdin.write(b"hello\n")
    child.stdin.close()
    assert child.wait(timeout=30) == 0 and child.poll() == 0
    line, fds, ids, ignored = child.stdout.read().decode().splitlines()
    assert line == "hello" and {"0", "1", "2"} <= set(fds.split()) and "77" not in fds.split()
    pid, session = ids.split()
    assert int(pid) == child.pid == int(session)
    assert not int(ignored.split()[1], 16) >> (signal.SIGPIPE - 1) & 1
    assert child.stderr.read() == b"said\n"
    lifecycle.forget(child.pid)
    for pipe in (child.stdout, child.stderr):
        pipe.close()


def test_a_spawned_childs_wait_times_out_and_a_kill_reads_as_popens() -> None:
    import subprocess
    import sys

    if not hasattr(os, "posix_spawn") or not Path("/proc/self/fd").is_dir():
        pytest.skip("spawn_piped is the Linux start")
    child = _spawned(sys.executable, "-c", "import time; time.sleep(60)")
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=0.2)
        lifecycle.end_chain(child)  # the group killed, the child collected
        assert child.returncode == -signal.SIGKILL and child.wait(timeout=1) == -signal.SIGKILL
    finally:
        lifecycle.forget(child.pid)
        for pipe in (child.stdin, child.stdout, child.stderr):
            pipe.close()


def test_a_spawn_of_what_cannot_run_says_so_and_leaves_nothing_open(tmp_path: Path) -> None:
    if not hasattr(os, "posix_spawn") or not Path("/proc/self/fd").is_dir():
        pytest.skip("spawn_piped is the Linux start")
    before = set(os.listdir("/proc/self/fd"))
    with pytest.raises(OSError):
        lifecycle.spawn_piped([str(tmp_path / "python")], marker=b"x", env={})
    assert set(os.listdir("/proc/self/fd")) == before


def test_a_spawned_childs_wait_leaves_no_descriptor_open() -> None:
    """wait(timeout) wakes on the child's end (a pidfd where Linux has one): that descriptor
    is closed once the child is collected, by a wait or by a kill, as its pipes are."""
    import sys

    if not hasattr(os, "posix_spawn") or not Path("/proc/self/fd").is_dir():
        pytest.skip("spawn_piped is the Linux start")
    before = set(os.listdir("/proc/self/fd"))
    ended = _spawned(sys.executable, "-c", "import time; time.sleep(0.2)")
    killed = _spawned(sys.executable, "-c", "import time; time.sleep(60)")
    try:
        assert ended.wait(timeout=30) == 0
        lifecycle.end_chain(killed)
        assert killed.wait(timeout=1) == -signal.SIGKILL
    finally:
        for child in (ended, killed):
            lifecycle.forget(child.pid)
            for pipe in (child.stdin, child.stdout, child.stderr):
                pipe.close()
    assert set(os.listdir("/proc/self/fd")) == before


def test_a_timed_wait_on_a_descriptor_past_1023_sleeps_rather_than_spins() -> None:
    """select.select refuses a descriptor numbered 1024 or more: a pidfd there is waited on
    without burning a core while the child runs (a library caller may hold many files)."""
    import resource
    import sys

    if not hasattr(os, "posix_spawn") or not Path("/proc/self/fd").is_dir():
        pytest.skip("spawn_piped is the Linux start")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if max(soft, hard if hard != resource.RLIM_INFINITY else 4096) < 1200:
        pytest.skip("fewer than 1200 descriptors allowed here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        child = _spawned(sys.executable, "-c", "import time; time.sleep(0.6)")
        try:
            before = resource.getrusage(resource.RUSAGE_SELF)
            assert child.wait(timeout=30) == 0
            after = resource.getrusage(resource.RUSAGE_SELF)
        finally:
            lifecycle.forget(child.pid)
            for pipe in (child.stdin, child.stdout, child.stderr):
                pipe.close()
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    used = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert used < 0.3, f"{used:.2f}s of CPU while waiting 0.6s for a child"


def test_a_timed_wait_whose_child_another_thread_collected_returns_at_once() -> None:
    """A second thread that collects the child (closing its pidfd) while a wait is between
    its poll and its sleep: the wait ends with the exit code, not at its timeout."""
    import sys
    import threading
    import time

    if not hasattr(os, "posix_spawn") or not Path("/proc/self/fd").is_dir():
        pytest.skip("spawn_piped is the Linux start")
    child = _spawned(sys.executable, "-c", "pass")
    real = lifecycle.Spawned._ended_within
    collected: list[bool] = []

    def between(ends: int, delay: float, most: float) -> None:
        if not collected:  # the child ends, and another thread collects it, just now
            collected.append(True)
            time.sleep(0.3)
            other = threading.Thread(target=child.poll)
            other.start()
            other.join()
        real(ends, delay, most)

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(lifecycle.Spawned, "_ended_within", staticmethod(between))
            started = time.monotonic()
            assert child.wait(timeout=20) == 0
            assert time.monotonic() - started < 5
    finally:
        lifecycle.forget(child.pid)
        for pipe in (child.stdin, child.stdout, child.stderr):
            pipe.close()


@contextlib.contextmanager
def _registered(argv: list[str], pause: float) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` started as envguard starts a probe (registered for kill_running()), once it
    printed "ready"; kill_running()'s pause is ``pause``. Killed and collected at the end."""
    child = lifecycle.start_child(argv, marker=b"envguard-test-interrupt", stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(lifecycle, "_TERM_PAUSE", pause)
            yield child
    finally:
        lifecycle.kill_group(child.pid)
        lifecycle.forget(child.pid)
        child.wait(timeout=10)
        if child.stdout is not None:
            child.stdout.close()


_READY_THEN_SLEEP = "print('ready', flush=True)\nwhile True:\n    time.sleep(1)\n"


def test_an_interrupt_goes_on_once_its_children_died_of_sigterm() -> None:
    """kill_running() (Ctrl-C) waits between SIGTERM and SIGKILL only until the children it
    signalled have ended, and leaves each for its starter to collect with its real end."""
    program = "import time\n" + _READY_THEN_SLEEP
    with _registered([sys.executable, "-c", program], pause=30.0) as child:
        started = time.monotonic()
        lifecycle.kill_running()
        assert time.monotonic() - started < 10
        assert child.wait(timeout=10) == -signal.SIGTERM


def test_an_interrupt_kills_a_child_that_outlives_its_sigterm() -> None:
    program = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    with _registered([sys.executable, "-c", program + _READY_THEN_SLEEP], pause=0.3) as child:
        started = time.monotonic()
        lifecycle.kill_running()
        assert time.monotonic() - started >= 0.3
        assert child.wait(timeout=10) == -signal.SIGKILL


def test_an_interrupt_gives_a_wrappers_child_its_sigterm_time(tmp_path: Path) -> None:
    """A --via wrapper that does not exec its engine (``sh -c 'srun ...'``) dies of the
    SIGTERM at once; the engine in its group still cancels its work before the SIGKILL."""
    done = tmp_path / "cancelled"
    engine = (
        "import signal, sys, time\n"
        "def cancel(*_):\n"
        "    time.sleep(0.2)\n"
        "    open(sys.argv[1], 'w').write('ok')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, cancel)\n" + _READY_THEN_SLEEP
    )
    # (a second command: no sh runs the engine by exec, so it stays the group's leader)
    wrapper = ["sh", "-c", f'"{sys.executable}" -c "$0" "$1"; exit $?', engine, str(done)]
    with _registered(wrapper, pause=20.0) as leader:
        lifecycle.kill_running()
        assert done.read_text() == "ok"
        assert leader.wait(timeout=10) == -signal.SIGTERM
