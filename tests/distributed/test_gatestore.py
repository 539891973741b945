"""The launcher gate's own store against peers that are not the gate: garbage, oversized
lines, bad requests, a port nobody serves. Real sockets on 127.0.0.1."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from envguard import gatestore
from envguard.gatestore import Client, Server, StoreError, closed_by_server, serve_or_join


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def served() -> Iterator[tuple[Client, Server, int]]:
    port = _port()
    client, server = serve_or_join("127.0.0.1", port, serve=None, timeout=5)
    assert server is not None
    yield client, server, port
    client.close()
    server.close()


def _raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := sock.recv(1 << 16):
            out += chunk
        return out


def test_the_store_sets_waits_counts_and_times_out(served: tuple[Client, Server, int]) -> None:
    client, _, port = served
    other, none = serve_or_join("127.0.0.1", port, serve=None, timeout=5)
    assert none is None  # the port is served: this one joins
    client.set("k", "v")
    assert other.get("k") == b"v" and other.check(["k"]) and not other.check(["k", "x"])
    assert [other.add("n"), client.add("n")] == [1, 2]
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        other.wait(["x"], timedelta(seconds=0.2))
    assert time.monotonic() - started < 2
    other.close()


def test_garbage_is_dropped_bad_requests_answered_and_the_store_goes_on(
    served: tuple[Client, Server, int],
) -> None:
    client, _, port = served
    assert _raw(port, b"not json\n") == b"" and _raw(port, b"[1]\n") == b""  # closed
    replies = _raw(port, b'{"op": "set", "key": 1}\n{"op": "nope"}\n').splitlines()
    assert [b"error" in r for r in replies] == [True, True]  # a bad request: an error reply
    assert b"error" in _raw(port, b'{"op": "wait", "keys": ["a"], "timeout": "x"}\n')
    assert b"error" in _raw(port, b'{"op": "set", "key": "a", "value": 5}\n')
    client.set("still", "here")
    assert client.get("still") == b"here"


def test_an_oversized_line_is_refused_not_held(
    served: tuple[Client, Server, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, _, port = served
    monkeypatch.setattr(gatestore, "MAX_LINE", 1000)
    assert _raw(port, b"x" * 5000) == b""  # closed, nothing kept
    client.set("after", "1")
    assert client.check(["after"])


def test_nobody_serving_ends_by_the_timeout_in_one_line() -> None:
    started = time.monotonic()
    with pytest.raises(StoreError, match="no answer"):
        serve_or_join("127.0.0.1", _port(), serve=False, timeout=0.5)
    assert time.monotonic() - started < 2


def test_a_client_sees_the_server_close(served: tuple[Client, Server, int]) -> None:
    _, server, port = served
    other, _ = serve_or_join("127.0.0.1", port, serve=False, timeout=5)
    assert not closed_by_server(other, 0.1)
    server.close()
    assert closed_by_server(other, 5)
    other.close()
