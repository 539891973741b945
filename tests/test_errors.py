"""Signals as the CLI's errors see them: noted, raised at the next wait, held where a
child is being started, and not ignored by one thread because another cleans up."""

from __future__ import annotations

import signal
import threading

import pytest

from envguard import errors


def test_one_threads_clean_up_does_not_let_another_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After Ctrl-C, a thread removing a far side's staged file waits in cleaning_up();
    another thread (a fleet's worker) must still stop at its next wait, not start and wait
    for remote work for up to 30 s."""
    monkeypatch.setattr(errors, "_received", [])
    errors.note_signal(signal.SIGINT)
    inside, done = threading.Event(), threading.Event()
    seen: list[BaseException | None] = []

    def clean_up() -> None:
        with errors.cleaning_up():
            errors.raise_if_signalled()  # this thread's clean-up goes on
            inside.set()
            done.wait(10)

    def worker() -> None:
        inside.wait(10)
        try:
            errors.raise_if_signalled()
            seen.append(None)
        except errors.Terminated as exc:
            seen.append(exc)

    threads = [threading.Thread(target=clean_up), threading.Thread(target=worker)]
    for thread in threads:
        thread.start()
    threads[1].join(10)
    done.set()
    threads[0].join(10)
    assert len(seen) == 1 and isinstance(seen[0], errors.Terminated)


def test_a_signal_inside_a_deferred_block_is_raised_when_it_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(errors, "_received", [])
    reached = []
    with pytest.raises(errors.Terminated) as raised, errors.signals_deferred():
        errors.on_signal(signal.SIGTERM, None)  # noted, not raised here
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
        "from envguard import errors\n"
        "errors.handle_signals()\n"
        "os.kill(os.getpid(), signal.SIGHUP)\n"
        "sum(range(1000))\n"
        "print(errors.received_signal(), signal.SIGINT in errors.catchable_signals())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "None True\n", "")
