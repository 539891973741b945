"""Where a restore writes: this host (the apply operations called in-process) or the far
side of a --via prefix (the same operations sent on stdin, as the probe is). Nothing but
Python is needed there; content travels over the prefix's stdin, in chunks."""

from __future__ import annotations

import base64
import contextlib
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from envguard.errors import ActionError, EnvguardError
from envguard.lifecycle import cleaning_up, signals_deferred
from envguard.reading import json_loads
from envguard.redact import redact_text

if TYPE_CHECKING:
    from envguard.probe.runner import ProbeRun

# Operations a signal must not stop halfway (install_file: the displaced file linked aside,
# the new one renamed in and hashed again); held, then raised once they are done.
_WHOLE = frozenset({"install_file"})

# Content sent per call: each call is one run of the prefix (ssh, pct exec) and one
# program compiled there, so chunks are large; base64 makes them a third larger.
CHUNK = 8 << 20


class Target:
    """This host: every operation runs in-process."""

    remote = False
    label = "this host"

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        """Run one apply operation; its answer (``ok`` false with ``error`` on failure)."""
        from envguard.probe.payload import local_package

        operation = local_package().apply.OPERATIONS[op]
        if op not in _WHOLE:
            answer: dict[str, Any] = operation(dict(args, op=op))
            return answer
        with signals_deferred():  # the old file kept, the new one renamed in: all, or none
            answer = operation(dict(args, op=op))
        return answer

    def send(self, source: Path, dest: str, **where: Any) -> str:
        """A staged copy of the local file ``source`` beside ``dest``; its path there
        (``where``: ``confine`` and ``cache``, see apply.refused)."""
        staged = self._staged(dest, **where)
        try:
            shutil.copyfile(source, staged)
        except OSError as exc:
            self.discard([staged])
            raise ActionError(f"cannot stage {dest}: {exc.strerror}") from None
        except BaseException:  # an interrupt: no partial copy stays beside ``dest``
            self.discard([staged])
            raise
        return staged

    def discard(self, paths: list[str]) -> None:
        """Remove staged files (after an error or an interrupt too); never raises."""
        with cleaning_up(), contextlib.suppress(EnvguardError):
            self.call("discard", paths=paths)

    def send_bytes(self, data: bytes, dest: str) -> str:
        answer = self.call("stage", dest=dest, data=base64.b64encode(data).decode())
        return self._path(answer, dest)

    def _staged(self, dest: str, **where: Any) -> str:
        return self._path(self.call("stage", dest=dest, **where), dest)

    @staticmethod
    def _path(answer: dict[str, Any], dest: str) -> str:
        if not answer.get("ok"):
            raise ActionError(str(answer.get("error") or f"cannot stage {dest}"))
        return str(answer["path"])


class NoAnswer(ActionError):
    """The far side gave no answer (unreachable, no python3 there): a failed action for a
    restore (exit 1); a measurement that could not be made where a probe needed it."""


def _one_line(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)[:200]


class RemoteTarget(Target):
    """The far side of a --via prefix."""

    remote = True

    def __init__(self, prefix: Sequence[str], python: str, *, timeout: float | None) -> None:
        import shlex

        self.prefix, self.python, self.timeout = tuple(prefix), python, timeout
        self.label = f"--via {shlex.join(self.prefix)}"

    def _start(
        self, op: str, args: dict[str, Any], *, cap: int, sink: IO[bytes] | None = None
    ) -> ProbeRun:
        """One operation started there: the apply payload on the prefix's stdin."""
        from envguard.probe.runner import ProbeRun

        return ProbeRun(
            self.python,
            dict(args, op=op),
            label=self.label,
            prefix=self.prefix,
            timeout=self.timeout,
            entry="apply",
            output_cap=cap,
            sink=sink,
        )

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        run = self._start(op, args, cap=1 << 20)
        data, stderr = run.output()
        try:
            answer = json_loads(data)
            if not isinstance(answer, dict):
                raise ValueError
        except (ValueError, RecursionError):
            if not data.strip() and not stderr.strip() and run.proc.returncode == 0:
                from envguard.probe.runner import no_stdin

                why = no_stdin(self.prefix)
                raise NoAnswer(f"{self.label}: no answer and no error: {why}") from None
            tail = stderr.strip().splitlines()[-1:] or ["no output"]
            raise NoAnswer(
                f"{self.label}: no answer from the far side"
                f" (exit {run.proc.returncode}): {_one_line(tail[0])}"
            ) from None
        return checked(op, answer, label=self.label)

    def send(self, source: Path, dest: str, **where: Any) -> str:
        staged = self._staged(dest, **where)
        try:
            with open(source, "rb") as fh:
                while block := fh.read(CHUNK):
                    answer = self.call("put", path=staged, data=base64.b64encode(block).decode())
                    if not answer.get("ok"):
                        raise ActionError(str(answer.get("error")))
        except BaseException:
            self.discard([staged])  # also after Ctrl-C: no partial copy stays over there
            raise
        return staged

    def discard(self, paths: list[str]) -> None:
        self.timeout, saved = 30.0, self.timeout
        try:
            super().discard(paths)  # the first error is the one to report
        finally:
            self.timeout = saved

    def fetch(self, op: str, *, cap: int, sink: IO[bytes], **args: Any) -> None:
        """Write the raw bytes an operation prints there (``pack``: a cache as a tarball)
        to ``sink`` as they come, at most ``cap`` of them."""
        run = self._start(op, args, cap=cap, sink=sink)
        _data, stderr = run.output()
        if run.proc.returncode != 0:
            tail = stderr.strip().splitlines()[-1:] or ["no output"]
            raise ActionError(f"{self.label}: {op} failed there: {_one_line(tail[0])}")


# What each operation's answer holds when it succeeded: a far side is untrusted, and its
# answers go on into file names, reports and decisions.
_ANSWERS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "stage": {"path": str},
    "file_from_git": {"path": str},
    "install_file": {"sha256": str, "md5": str},
    "extract": {"files": int, "bytes": int},
    "room": {"free": int},
    "run": {"code": int, "tail": list},
    "git": {"code": int, "tail": list},
    "read_files": {"files": dict},
    "swap": {"removed": list},
    "list_wheels": {"wheels": list},
    "find_uv": {},
    "begin_build": {},
    "put": {},
    "discard": {},
    "unsafe_place": {},
}


def checked(op: str, answer: dict[str, Any], *, label: str) -> dict[str, Any]:
    """``answer`` when it has the shape ``op``'s answers have; ActionError otherwise."""
    ok = answer.get("ok")
    if ok is False:  # the far side's words go on into error lines: redacted here
        return {"ok": False, "error": redact_text(str(answer.get("error"))[:500])}
    shape = _ANSWERS.get(op, {})
    if ok is not True or any(
        not isinstance(answer.get(key), kind) or isinstance(answer.get(key), bool)
        for key, kind in shape.items()
    ):
        raise ActionError(f"{label}: a malformed answer to {op} from the far side")
    if isinstance(answer.get("tail"), list):  # the output of a command run there
        answer = dict(answer, tail=[redact_text(str(line)) for line in answer["tail"]])
    return answer
