"""The launcher gate's own store: a key-value store over TCP in the standard library, so
``envguard gate --torchrun`` never imports torch (importing CUDA torch took 6.5-9.8 s of
the job's start). Only envguard speaks to it: the participant that binds the port serves
it in a thread, the others connect.

One JSON object per line each way. Every request and reply is capped (MAX_LINE), the
server answers at most MAX_CLIENTS connections at once, a wait is bounded by the timeout
the client sends (at most MAX_WAIT), and nothing a peer sends is more than a key or a
string value: a stray client, or a port another program holds, is an error line, never a
hang or a traceback.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from datetime import timedelta
from typing import Any

MAX_LINE = 16 << 20  # a fingerprint's detail is tens of kilobytes
MAX_CLIENTS = 4096
MAX_WAIT = 3600.0
_RETRY = 0.1  # seconds between connection attempts while the server is not up yet


class StoreError(Exception):
    """The peer broke the protocol, or the connection failed."""


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")


class _Lines:
    """Lines from a socket, each at most MAX_LINE bytes."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def read(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_LINE:
                raise StoreError("a line over the size limit")
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise StoreError("connection closed")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            raise StoreError("not the gate's protocol") from None
        if not isinstance(value, dict):
            raise StoreError("not the gate's protocol")
        return value


def _keys(value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
        raise StoreError("keys must be a list of strings")
    return value


class Server:
    """The store, served from a daemon thread per connection until :meth:`close`."""

    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.data: dict[str, str] = {}
        self.cond = threading.Condition()
        self.clients = threading.BoundedSemaphore(MAX_CLIENTS)
        self.conns: set[socket.socket] = set()
        self.closed = False
        threading.Thread(target=self._accept, name="envguard-gate-server", daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed
                return
            if not self.clients.acquire(blocking=False):
                conn.close()
                continue
            with self.cond:
                self.conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        lines = _Lines(conn)
        try:
            while True:
                _send(conn, self.answer(lines.read()))
        except (OSError, StoreError):
            pass
        finally:
            with self.cond:
                self.conns.discard(conn)
            conn.close()
            self.clients.release()

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        """One request's reply (a bad request: an error reply; the connection stays)."""
        op = request.get("op")
        try:
            with self.cond:
                if op == "set":
                    key, value = request.get("key"), request.get("value")
                    if not isinstance(key, str) or not isinstance(value, str):
                        raise StoreError("set needs a key and a string value")
                    self.data[key] = value
                    self.cond.notify_all()
                    return {"ok": True}
                if op == "add":
                    key = request.get("key")
                    if not isinstance(key, str) or (
                        key in self.data and not self.data[key].isdigit()
                    ):
                        raise StoreError("add needs a key holding a number")
                    self.data[key] = str(int(self.data.get(key, "0")) + 1)
                    self.cond.notify_all()
                    return {"ok": True, "value": int(self.data[key])}
                keys = _keys(request.get("keys"))
                if op == "check":
                    return {"ok": True, "each": [k in self.data for k in keys]}
                if op == "get":
                    return {
                        "ok": all(k in self.data for k in keys),
                        "values": [self.data.get(k) for k in keys],
                    }
                if op == "wait":
                    seconds = request.get("timeout")
                    if not isinstance(seconds, (int, float)) or seconds != seconds:
                        raise StoreError("wait needs a timeout")
                    done = self.cond.wait_for(
                        lambda: all(k in self.data for k in keys), min(max(0.0, seconds), MAX_WAIT)
                    )
                    return {"ok": done}
        except StoreError as exc:
            return {"ok": False, "error": str(exc)}
        return {"ok": False, "error": "unknown operation"}

    def close(self) -> None:
        """Stop serving: every client sees its connection close (their cue to go on)."""
        self.closed = True
        with self.cond:
            open_ = [self.listener, *self.conns]
        for sock in open_:  # shutdown wakes the threads blocked in accept() and recv()
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.listener.close()


class Client:
    """The gate's Store (rendezvous.Store) over one connection to a :class:`Server`."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lines = _Lines(sock)
        self.lock = threading.Lock()

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            try:
                _send(self.sock, request)
                reply = self.lines.read()
            except OSError as exc:
                raise StoreError(f"connection lost ({exc.strerror or exc})") from None
        if "error" in reply:
            raise StoreError(str(reply["error"])[:200])
        return reply

    def close(self) -> None:
        self.sock.close()

    def set(self, key: str, value: str | bytes) -> None:
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        self._ask({"op": "set", "key": key, "value": text})

    def add(self, key: str) -> int:
        value = self._ask({"op": "add", "key": key}).get("value")
        if not isinstance(value, int):
            raise StoreError("not the gate's protocol")
        return value

    def multi_get(self, keys: list[str]) -> list[bytes]:
        reply = self._ask({"op": "get", "keys": keys})
        values = reply.get("values")
        if reply.get("ok") is not True or not isinstance(values, list) or len(values) != len(keys):
            raise StoreError("a key asked for is not set")
        return [str(v).encode() for v in values]

    def get(self, key: str) -> bytes:
        return self.multi_get([key])[0]

    def check(self, keys: list[str]) -> bool:
        each = self._ask({"op": "check", "keys": keys}).get("each")
        return isinstance(each, list) and all(each)

    def wait(self, keys: list[str], timeout: timedelta) -> None:
        if (
            self._ask({"op": "wait", "keys": keys, "timeout": timeout.total_seconds()}).get("ok")
            is not True
        ):
            raise TimeoutError("wait timed out")  # as torch's store: the caller asks check()


def closed_by_server(client: Client, timeout: float) -> bool:
    """Whether the server closed ``client``'s connection within ``timeout`` seconds."""
    with client.lock:
        client.sock.settimeout(max(0.01, timeout))
        try:
            return client.sock.recv(1) == b""
        except OSError:  # a timeout, or a reset: either way, nothing more to wait for
            return False
        finally:
            client.sock.settimeout(None)


def serve_or_join(
    addr: str, port: int, *, serve: bool | None, timeout: float
) -> tuple[Client, Server | None]:
    """A client of the store at ``addr:port``, and the server when this participant serves
    it. ``serve``: True serves (the port must be free), False joins, None serves when this
    host can bind ``addr:port`` (the first participant there) and joins otherwise. Joining
    retries until ``timeout`` while nobody listens yet."""
    server = None
    if serve is not False:
        listener = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT only
        try:
            # A named server listens on every interface, as torch's store does; "who can
            # bind the endpoint's own address" is how a participant finds it is on that host.
            listener.bind(("" if serve else addr, port))
            listener.listen(128)
            server = Server(listener)
        except OSError as exc:
            listener.close()
            if serve:
                raise StoreError(f"cannot serve {addr}:{port} ({exc.strerror or exc})") from None
    end = time.monotonic() + timeout
    while True:
        try:
            sock = socket.create_connection((addr, port), timeout=max(0.1, end - time.monotonic()))
            break
        except OSError as exc:
            if time.monotonic() + _RETRY >= end:
                if server is not None:
                    server.close()
                raise StoreError(f"no answer ({exc.strerror or exc})") from None
            time.sleep(_RETRY)
    sock.settimeout(None)  # every call is bounded by the gate's BoundedStore
    return Client(sock), server
