"""Every wait of the gate ends by envguard's own deadline: a master that freezes, dies or
drops off the network mid-exchange gives every live rank one line, within the timeout
plus 2 s, never a hang or a traceback.

The first tests use an in-memory store that stops answering; the others run real ranks with
torch's TCPStore (torch 2.13.0+cpu venv) and freeze the master with SIGSTOP, kill it, or
take the link down between two network namespaces joined by a veth pair.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from distributed.test_gate import MemoryStore, _detail, _fp
from envguard.distributed import Fingerprint, MissingRanksError, Topology, exchange
from torchstack import NEEDS_TORCH

TIMEOUT = 0.5


class DyingStore(MemoryStore):
    """A store whose server can be frozen (every call then blocks until the test ends) or
    killed (every call then fails on the connection, as torch's DistNetworkError does)."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen = threading.Event()
        self.killed = False
        self.released = threading.Event()

    def _serve(self) -> None:
        if self.frozen.is_set():
            self.released.wait(60)
        if self.killed:
            raise RuntimeError("Failed to recv, got 0 bytes. Connection was likely closed.")

    def set(self, key: str, value: str | bytes) -> None:
        self._serve()
        super().set(key, value)

    def get(self, key: str) -> bytes:
        self._serve()
        return super().get(key)

    def check(self, keys: list[str]) -> bool:
        self._serve()
        return super().check(keys)

    def wait(self, keys: list[str], timeout: timedelta) -> None:
        end = time.monotonic() + timeout.total_seconds()
        while time.monotonic() < end:  # as torch's: the server's failure shows mid-wait
            self._serve()
            if self.check(keys):
                return
            time.sleep(0.01)
        self._serve()  # torch's "stop waiting" round trip, which a frozen server never answers
        raise RuntimeError("Socket Timeout")


@pytest.fixture
def dying() -> Iterator[DyingStore]:
    store = DyingStore()
    yield store
    store.released.set()  # the abandoned calls' threads end with the test


def _rank_one(store: DyingStore, world: int = 3) -> tuple[threading.Thread, list[object]]:
    """Rank 1 of ``world`` in a thread (rank 0 is the store's server: not run here)."""
    out: list[object] = []

    def one() -> None:
        started = time.monotonic()
        try:
            exchange(
                store,
                _fp(_detail(six="1.17.0")),
                Topology(1, world),
                prefix="t",
                timeout=TIMEOUT,
                host="node-b",
                node="1",
                server="its store at 10.0.0.1:29501",
            )
        except BaseException as exc:  # handed to the test
            out.append(exc)
        out.append(time.monotonic() - started)

    thread = threading.Thread(target=one, daemon=True)
    thread.start()
    assert store.cond.acquire(timeout=5)
    store.cond.wait_for(lambda: "t/hash/1" in store.data, 5)
    store.cond.release()
    return thread, out


def test_a_frozen_store_is_given_up_at_envguards_deadline(dying: DyingStore) -> None:
    thread, out = _rank_one(dying)
    dying.frozen.set()  # rank 0's node stops answering while rank 1 waits for the verdict
    thread.join(TIMEOUT + 5)
    assert not thread.is_alive(), "the gate hung on a frozen store"
    error, took = out
    assert isinstance(error, MissingRanksError) and error.missing == (0,)
    assert str(error).startswith(
        "rank 0 did not answer at the environment gate: its store at 10.0.0.1:29501 stopped"
        " answering after "
    )
    assert "rank 1 on node-b waited" in str(error) and "\n" not in str(error)
    assert isinstance(took, float) and took <= TIMEOUT + 2


def test_a_killed_store_is_one_line_at_once(dying: DyingStore) -> None:
    thread, out = _rank_one(dying)
    dying.killed = True
    thread.join(TIMEOUT + 5)
    error, took = out
    assert isinstance(error, MissingRanksError)
    assert "its store at 10.0.0.1:29501 lost its connection after" in str(error)
    assert "Connection was likely closed" in str(error)
    assert isinstance(took, float) and took <= TIMEOUT + 2


def test_a_store_that_never_answers_a_plain_call_is_bounded_too(dying: DyingStore) -> None:
    dying.frozen.set()  # frozen before rank 1 even publishes
    started = time.monotonic()
    with pytest.raises(MissingRanksError, match="stopped answering"):
        exchange(
            dying,
            Fingerprint("0" * 64, {}),
            Topology(1, 2),
            prefix="t",
            timeout=TIMEOUT,
            host="node-b",
            node="1",
        )
    assert time.monotonic() - started <= TIMEOUT + 2


# Real ranks: the gate in-process, as a training script calls it before
# init_process_group; the time from its call to its one line on stdout. torch is loaded
# first, as a training script does, with its C++ warnings off as docs/cluster.md says
# (envguard cannot quiet a torch it did not load).
RANK = """\
import sys, time
from envguard import distributed
from envguard.errors import EnvguardError

distributed.fingerprint()  # the distribution cache warm, as after envguard snapshot
import torch.distributed  # a training script has torch loaded before it gates
started = time.monotonic()
try:
    distributed.assert_homogeneous(timeout=float(sys.argv[1]))
except EnvguardError as exc:
    print(f"{time.monotonic() - started:.2f}", flush=True)
    sys.stderr.write(f"error: {exc.message}\\n")
    sys.exit(exc.exit_code)
print("passed", flush=True)
"""

# A client of rank 0's store that says when rank 1 has published its hash.
WATCH = """\
import sys
from datetime import timedelta
import torch.distributed as dist

store = dist.TCPStore(sys.argv[1], int(sys.argv[2]), 3, False, timeout=timedelta(seconds=60))
store.wait(["envguard/gate/hash/1"], timedelta(seconds=60))
print("published", flush=True)
"""

GATE = 4.0  # the ranks' timeout: long enough for a loaded machine to fingerprint


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Ranks:
    """Real rank processes of a 3-rank job whose rank 2 never comes: the exchange is under
    way (rank 0 waits for rank 2, rank 1 for rank 0's verdict) when the test strikes."""

    def __init__(
        self,
        python: Path,
        tmp_path: Path,
        addr: str,
        prefixes: list[list[str]],
        *,
        cli: bool = False,
    ) -> None:
        self.python, self.addr, self.port, self.cli = python, addr, _free_port(), cli
        (tmp_path / "rank.py").write_text(RANK, encoding="utf-8")
        (tmp_path / "watch.py").write_text(WATCH, encoding="utf-8")
        self.tmp_path, self.prefixes = tmp_path, prefixes
        self.procs: list[subprocess.Popen[str]] = []  # rank 0, rank 1
        self.started: list[subprocess.Popen[str]] = []  # and the watcher

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "TORCH"))}
        env |= {"MASTER_ADDR": self.addr, "MASTER_PORT": str(self.port), "WORLD_SIZE": "3"}
        for rank in (0, 1):
            argv = [*self.prefixes[rank], str(self.python), str(self.tmp_path / "rank.py")]
            argv.append(str(GATE))
            mine = {**env, "RANK": str(rank), "TORCH_CPP_LOG_LEVEL": "ERROR"}
            if self.cli and rank == 1:  # the command line: envguard loads torch itself
                argv = [str(self.python), "-m", "envguard", "gate", "--timeout", str(GATE)]
                del mine["TORCH_CPP_LOG_LEVEL"]
            self.procs.append(self._popen(argv, mine))
        # The watcher joins rank 0's store (the gate's, at MASTER_PORT + 1) from rank 0's side.
        watch = [*self.prefixes[0], str(self.python), str(self.tmp_path / "watch.py")]
        watcher = self._popen([*watch, self.addr, str(self.port + 1)], env)
        out, err = watcher.communicate(timeout=120)
        assert out == "published\n", err

    def _popen(self, argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self.started.append(proc)
        return proc

    def finish(self, rank: int) -> tuple[int, float, str]:
        """Rank ``rank``'s exit status, the gate's time, and its stderr."""
        out, err = self.procs[rank].communicate(timeout=GATE + 30)
        return self.procs[rank].returncode, float(out.strip() or "inf"), err

    def cleanup(self) -> None:
        for proc in self.started:  # by PID: only what this test started
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
            proc.communicate()


@pytest.fixture
def ranks(
    torch_venvs: dict[str, Path], tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Ranks]:
    cli = "command" in request.node.name
    made = Ranks(torch_venvs["a"] / "bin" / "python", tmp_path, "127.0.0.1", [[], []], cli=cli)
    yield made
    made.cleanup()


def _one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.slow
@NEEDS_TORCH
def test_a_frozen_master_gives_the_live_rank_one_line_within_the_deadline(ranks: Ranks) -> None:
    ranks.start()
    os.kill(ranks.procs[0].pid, signal.SIGSTOP)
    code, took, err = ranks.finish(1)
    assert code == 1 and took <= GATE + 2, (took, err)
    line = _one_line(err)
    assert line.startswith(
        f"error: rank 0 did not answer at the environment gate: its store at"
        f" 127.0.0.1:{ranks.port + 1} stopped answering after"
    ), line


@pytest.mark.slow
@NEEDS_TORCH
def test_a_killed_master_gives_the_command_one_line_not_a_traceback(ranks: Ranks) -> None:
    """``envguard gate`` on rank 1: envguard loads torch, and keeps its C++ log quiet."""
    ranks.start()
    ranks.procs[0].kill()
    killed = time.monotonic()
    _, err = ranks.procs[1].communicate(timeout=GATE + 30)
    assert ranks.procs[1].returncode == 1, err
    assert time.monotonic() - killed <= GATE + 2
    assert "Traceback" not in err and "[W" not in err, err
    error, hint = err.splitlines()
    assert error.startswith("error: rank 0 did not answer at the environment gate: its store")
    assert f"127.0.0.1:{ranks.port + 1} lost its connection after" in error
    assert hint.startswith("hint: see rank 0's node and its log")


@pytest.fixture
def namespaces() -> Iterator[tuple[list[str], list[str], str]]:
    """Two network namespaces joined by a veth pair: rank 0's side at 10.213.0.1, rank 1's
    at 10.213.0.2; yields the prefix that runs a command in each and rank 0's link."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and ip(8) for network namespaces")
    tag = f"eg{os.getpid() % 100000}"
    ns_a, ns_b, link = f"{tag}a", f"{tag}b", f"{tag}va"

    def ip(*argv: str) -> None:
        subprocess.run(["ip", *argv], check=True, capture_output=True, timeout=30)

    try:
        ip("netns", "add", ns_a)
        ip("netns", "add", ns_b)
        ip("link", "add", link, "type", "veth", "peer", "name", f"{tag}vb")
        ip("link", "set", link, "netns", ns_a)
        ip("link", "set", f"{tag}vb", "netns", ns_b)
        for ns, dev, addr in ((ns_a, link, "10.213.0.1"), (ns_b, f"{tag}vb", "10.213.0.2")):
            ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
            ip("-n", ns, "link", "set", "lo", "up")
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot make network namespaces here: {exc.stderr.strip()}")
    try:
        yield ["ip", "netns", "exec", ns_a], ["ip", "netns", "exec", ns_b], link
    finally:
        for ns in (ns_a, ns_b):  # the veth pair goes with its namespaces
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


@pytest.mark.slow
@NEEDS_TORCH
def test_a_link_taken_down_mid_exchange_ends_every_live_rank_within_the_deadline(
    torch_venvs: dict[str, Path], tmp_path: Path, namespaces: tuple[list[str], list[str], str]
) -> None:
    in_a, in_b, link = namespaces
    ranks = Ranks(torch_venvs["a"] / "bin" / "python", tmp_path, "10.213.0.1", [in_a, in_b])
    try:
        ranks.start()
        subprocess.run([*in_a, "ip", "link", "set", link, "down"], check=True, timeout=30)
        # Rank 1 has lost its master; rank 0 still waits for rank 2, who never comes.
        code, took, err = ranks.finish(1)
        assert code == 1 and took <= GATE + 2, (took, err)
        assert "rank 0 did not answer at the environment gate: its store at" in _one_line(err)
        code, took, err = ranks.finish(0)
        assert code == 1 and took <= GATE + 2, (took, err)
        assert _one_line(err).startswith("error: rank 2 of 3 never arrived at the environment")
    finally:
        ranks.cleanup()
