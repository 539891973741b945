"""What an engine's fan-out left behind, node by node: a folder of per-node files, or one
stream of lines (clush's and pdsh's ``host: ...``, srun's ``--label`` ``N: ...``, or bare
lines), each node's document a snapshot, a probe report or the envelope of
`envguard probe-payload`.

Every node is an answer: its document, or why there is none ("no report (exit 3)"), from
the engine's own failure lines (srun, clush, pdsh) and what the node printed instead. One
broken node is a row of the fleet, never a reason to refuse the rest. Nothing read here is
trusted: documents are validated where they are used, names are checked as host names.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from envguard.errors import EnvguardError, UsageError
from envguard.probe.report import validate_report
from envguard.reading import json_loads
from envguard.snapshots import document, store
from envguard.snapshots.hosts import check_host

if TYPE_CHECKING:
    from envguard.probe.report_shape import ProbeReport

# The engines' own lines about a node that failed (each names the node first).
_ENGINE_LINES = (
    re.compile(rb"^srun: error: ([^\s:]+): task (\d+): (.+)$"),
    re.compile(rb"^clush: ([^\s:]+)(): (.+)$"),
    re.compile(rb"^pdsh@[^\s:]*: ([^\s:]+)(): (.+)$"),
)
_PREFIX = re.compile(rb"^([A-Za-z0-9_.@%\[\]-]{1,253}): ")
# The engines' lines about the run as a whole ("srun: error: Unable to create step").
_ENGINE_WIDE = re.compile(rb"^(?:srun|clush|pdsh@[^\s:]*|salloc|sbatch): ")
_EXIT = re.compile(r"exit (?:code|status):? (-?\d+)")
# A node's document larger than this is not one (a 100,000-package snapshot is ~40 MB).
MAX_DOCUMENT = 256 << 20


@dataclass(frozen=True)
class Source:
    """Where one node's document lies: the (offset, length) ``parts`` of ``path``, joined
    (none: the whole file). ``host``: the name the engine or the file gave it; None or a
    number (a task) when the document's own node name is to be used."""

    path: str
    host: str | None
    parts: tuple[tuple[int, int], ...] = ()

    @property
    def size(self) -> int | None:
        """The document's length in bytes (None: the whole file's)."""
        return sum(length for _, length in self.parts) if self.parts else None


@dataclass
class Gathered:
    """All nodes of one or more inputs: documents to read, and what is known of the nodes
    without one (the engine's failure line, the node's own last line of text)."""

    sources: list[Source] = field(default_factory=list)
    said: dict[str, str] = field(default_factory=dict)  # host -> its last line of text
    engine: dict[str, str] = field(default_factory=dict)  # host -> the engine's line
    wide: list[str] = field(default_factory=list)  # the engine's lines about the whole run
    tasks: dict[str, str] = field(default_factory=dict)  # srun's task number -> its node

    def silent(self) -> list[str]:
        """The nodes the engine or their own words name (a task by its node, once srun
        said which): each is a row unless a document of its own turns up."""
        for task, host in self.tasks.items():
            if task in self.said and host not in self.said:
                self.said[host] = self.said[task]
        return [*self.engine, *(host for host in self.said if not host.isdigit())]


def gather(refs: list[str]) -> Gathered:
    """The nodes of ``refs``: folders (each ``*.json`` one node, named by its file), JSON
    files (one node each), other files and ``-`` (stdin) read as an engine's stream."""
    found = Gathered()
    for ref in refs:
        path = Path(ref)
        if ref == "-":
            found.sources += _stream(_stdin_copy(), found)
        elif path.is_dir():
            files = sorted(p for p in path.glob("*.json") if p.is_file())
            if not files:
                raise UsageError(f"{ref}: no *.json snapshots or reports in this folder")
            found.sources += [Source(str(p), p.stem) for p in files]
        elif path.suffix == ".json" or not path.is_file():
            resolved = store.resolve(ref)  # a snapshot name, as before
            found.sources.append(Source(str(resolved), resolved.stem))
        else:
            found.sources += _stream(path, found)
    return found


def _stdin_copy() -> Path:
    """stdin, copied to a temporary file: workers read their nodes from it by offset."""
    import atexit
    import contextlib
    import os
    import shutil
    import sys
    import tempfile

    fd, name = tempfile.mkstemp(prefix="envguard-fleet-", suffix=".txt")

    def remove() -> None:
        with contextlib.suppress(OSError):
            os.unlink(name)

    atexit.register(remove)
    with os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(sys.stdin.buffer, out, 1 << 20)
    return Path(name)


# The line `envguard probe-payload` prints opens with its length: an engine that splits
# long lines (srun --label every 1,024 bytes, each piece prefixed again) is undone by
# joining a node's pieces until the envelope is whole.
_ENVELOPE = re.compile(
    rb'^\{"node": (?:"(?:[^"\\]|\\.)*"|null), "exit": -?\d{1,12}, "bytes": (\d{1,15}), "report": '
)


class _Open:
    """A node's envelope still arriving in pieces."""

    def __init__(self, start: int, body: bytes, need: int) -> None:
        self.parts, self.have, self.need = [(start, len(body))], len(body), need


def _stream(path: Path, found: Gathered) -> list[Source]:
    """The nodes of one stream: a line that holds a JSON object (after a ``host: `` prefix
    or bare) is one node's document, its pieces joined when the engine split it; the
    engines' failure lines and a node's other lines say why a node has none."""
    sources: list[Source] = []
    arriving: dict[str | None, _Open] = {}

    def close(host: str | None) -> None:
        piece = arriving.pop(host, None)
        if piece is not None:  # cut off: read_document says so
            sources.append(Source(str(path), host, tuple(piece.parts)))

    try:
        fh = open(path, "rb")  # noqa: SIM115  # closed below; lines are read by offset
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})") from None
    with fh:
        offset = 0
        # A line is read whole only up to a document's limit: a hostile stream of one
        # endless line costs that much memory, not all of it.
        for line in iter(lambda: fh.readline(MAX_DOCUMENT + 1), b""):
            start, offset = offset, offset + len(line)
            body = line.rstrip(b"\r\n")
            host = None
            prefix = _PREFIX.match(body)
            if prefix is not None:
                host = prefix.group(1).decode("ascii")
            if host in arriving and not _ENVELOPE.match(body[prefix.end() :] if prefix else body):
                piece = arriving[host]  # the next piece of a split line
                cut = prefix.end() if prefix else 0
                piece.parts.append((start + cut, len(body) - cut))
                piece.have += len(body) - cut
                if piece.have >= piece.need:
                    sources.append(Source(str(path), host, tuple(arriving.pop(host).parts)))
                continue
            if _engine_line(body, found):
                continue
            if _ENGINE_WIDE.match(body):
                found.wide.append(_printable(body.decode("utf-8", "replace")))
                continue
            if prefix is not None:
                body = body[prefix.end() :]
                start += prefix.end()
            close(host)
            envelope = _ENVELOPE.match(body)
            need = envelope.end() + int(envelope.group(1)) + 1 if envelope else 0
            if envelope and len(body) < need:
                arriving[host] = _Open(start, body, need)
            elif body.lstrip().startswith(b"{"):
                sources.append(Source(str(path), host, ((start, len(body)),)))
            elif host is not None and body.strip():
                found.said[host] = _printable(body.decode("utf-8", "replace"))
    for host in list(arriving):
        close(host)
    return sources


def _engine_line(line: bytes, found: Gathered) -> bool:
    for pattern in _ENGINE_LINES:
        match = pattern.match(line)
        if match is not None:
            host = match.group(1).decode("ascii", "replace")
            if match.group(2):  # srun: what task N printed was this node's
                found.tasks[match.group(2).decode("ascii")] = host
            text = _printable(match.group(3).decode("utf-8", "replace"))
            if host not in found.engine or _EXIT.search(text):  # the line with the code
                found.engine[host] = text
            return True
    return False


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text.strip())[:200]


def no_report(host: str, found: Gathered) -> str:
    """Why ``host`` has no document: "no report (exit 3): what it said"."""
    engine, said = found.engine.get(host, ""), found.said.get(host)
    code = _EXIT.search(engine)
    why = f"exit {code.group(1)}" if code else engine or "nothing received"
    return f"no report ({why})" + (f": {said}" if said else "")


@dataclass(frozen=True)
class NodeDocument:
    """One node's parsed document: ``kind`` "snapshot" or "report", and the node's name
    as it says it (an envelope's ``node``), to label a task number or a bare line."""

    kind: str
    data: dict[str, Any]
    node: str | None


class NodeFailed(EnvguardError):
    """A node's document is missing, broken or the probe's error: a row of the fleet."""


def read_document(source: Source) -> NodeDocument:
    """The document at ``source``, parsed and classified; NodeFailed saying what is wrong."""
    raw = _read(source)
    if not raw.strip():
        raise NodeFailed("no report (empty output)")
    try:
        data = json_loads(raw)
    except RecursionError:
        raise NodeFailed("not a report (JSON nested too deeply)") from None
    except UnicodeDecodeError:
        raise NodeFailed("not a report (not UTF-8)") from None
    except json.JSONDecodeError as exc:
        if not raw.lstrip().startswith(b"{"):
            raise NodeFailed("not a report (not JSON)") from None
        if not raw.rstrip().endswith(b"}"):  # a node killed mid-write, a full disk
            raise NodeFailed(f"not a report (JSON cut off after {len(raw)} bytes)") from None
        raise NodeFailed(f"not a report (bad JSON at byte {exc.pos})") from None
    except ValueError as exc:  # a number read_number refuses
        raise NodeFailed(f"not a report ({exc})") from None
    if not isinstance(data, dict):
        raise NodeFailed("not a report (not a JSON object)")
    node = data.get("node")
    node = node if isinstance(node, str) else None
    if "node" in data and "report" not in data and "schema_version" not in data:
        raise NodeFailed(_failure_record(data))  # a recipe's record of a failed node
    if "report" in data:  # the envelope of `envguard probe-payload`
        code = data.get("exit")
        report = data["report"]
        if report is None:
            raise NodeFailed(f"no report (exit {code})" if isinstance(code, int) else "no report")
        return NodeDocument("report", _report(report, code), node)
    if "schema_version" in data:
        return NodeDocument("snapshot", data, node)
    return NodeDocument("report", _report(data, 0), node)


def _read(source: Source) -> bytes:
    try:
        with open(source.path, "rb") as fh:
            if not source.parts:  # the file's own size: no buffer of MAX_DOCUMENT to allocate
                size = os.fstat(fh.fileno()).st_size
                raw = fh.read(min(size, MAX_DOCUMENT) + 1)
            elif (source.size or 0) > MAX_DOCUMENT:
                raw = b" " * (MAX_DOCUMENT + 1)  # not read: too large
            else:
                pieces = []
                for offset, length in source.parts:
                    fh.seek(offset)
                    pieces.append(fh.read(length))
                raw = b"".join(pieces)
    except OSError as exc:
        raise NodeFailed(f"cannot read {source.path} ({exc.strerror})") from None
    if len(raw) > MAX_DOCUMENT:
        raise NodeFailed(f"not a report (larger than {MAX_DOCUMENT >> 20} MiB)")
    return raw


def _failure_record(data: dict[str, Any]) -> str:
    """A recipe's line for a node with no output (ansible's unreachable host)."""
    code, message = data.get("exit"), data.get("message")
    why = f"exit {code}" if isinstance(code, int) and not isinstance(code, bool) else "failed"
    said = _printable(message) if isinstance(message, str) and message.strip() else ""
    return f"no report ({why})" + (f": {said}" if said else "")


def _report(data: object, code: object) -> dict[str, Any]:
    from envguard.errors import ProbeError

    returncode = code if isinstance(code, int) and not isinstance(code, bool) else 0
    try:
        return dict(validate_report(data, label="probe", returncode=returncode))
    except ProbeError as exc:
        raise NodeFailed(exc.message.removeprefix("probe: ")) from None


def snapshot_data(found: NodeDocument, *, host: str) -> dict[str, Any]:
    """A node's document as snapshot data (a report made into one, named ``host``)."""
    if found.kind == "snapshot":
        return found.data
    from envguard.snapshots.request import CaptureRequest

    request = CaptureRequest(python="python3", name=host, include_cwd_repo=False)
    return document.from_report(cast("ProbeReport", found.data), request)


def label(source: Source, found: NodeDocument | None, index: int) -> str:
    """A node's name: the engine's (a file's) unless it is a task number, then the one the
    node gave itself; ``line N`` when there is neither."""
    if source.host is not None and not source.host.isdigit():
        return source.host
    if found is not None and found.node is not None:
        try:
            return check_host(found.node, source="the node's name")
        except UsageError:
            pass
    return f"task {source.host}" if source.host is not None else f"node #{index + 1}"
