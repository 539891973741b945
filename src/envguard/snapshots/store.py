"""Load and save snapshots: schema checks, name lookup, atomic writes."""

from __future__ import annotations

import errno
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from envguard import notices
from envguard.errors import ActionError, SnapshotError, UsageError, field_path
from envguard.owned import own_folder
from envguard.reading import json_loads, suspect_numbers
from envguard.version import SCHEMA_VERSION

TYPE_CHECKING = False  # typing loads once the probe runs (diff reads this module first)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from envguard.snapshots.document import Document
    from envguard.snapshots.models import Snapshot

SNAPSHOT_DIR = "snapshots"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def validate_name(name: str) -> str:
    """A snapshot name that is safe as a file name."""
    if not _NAME.match(name):
        raise UsageError(
            f"--name {name!r}: use letters, digits, '.', '_' and '-' (no path separators)"
        )
    return name


def dumps(snapshot: Snapshot | Document) -> str:
    """Indented JSON with sorted keys, so snapshots diff well in git (a Snapshot, or the
    document that is its file: snapshots.document)."""
    data = snapshot if isinstance(snapshot, dict) else snapshot.model_dump(mode="json")
    return indented(data) + "\n"


def indented(data: object) -> str:
    """``json.dumps(data, indent=2, sort_keys=True, allow_nan=False)``, character for
    character, in a third of its time: with an indent, json encodes in Python, a
    generator per container, and every snapshot written waited 6 ms for it (the bench
    venv's, 180 KB). Strings are encoded by json's own C function, a list of them in one
    join; anything but JSON's own types (a tuple, a key that is not a string) is left to
    json.dumps."""
    parts: list[str] = []
    try:
        _indent(data, "\n", parts)
    except (_NotPlain, RecursionError):  # RecursionError: a value that holds itself
        return json.dumps(data, indent=2, sort_keys=True, allow_nan=False)
    return "".join(parts)


class _NotPlain(Exception):
    """A value indented() leaves to json.dumps."""


_ENCODE: Callable[[str], str] = json.encoder.encode_basestring_ascii


def _indent(value: Any, newline: str, parts: list[str]) -> None:
    """Append ``value``'s text to ``parts``, its inner lines starting with ``newline`` and
    two more spaces."""
    kind = type(value)
    if kind is str:
        parts.append(_ENCODE(value))
    elif kind is dict:
        if not value:
            parts.append("{}")
            return
        inner = newline + "  "
        head = "{" + inner
        for key in sorted(value):
            if type(key) is not str:
                raise _NotPlain
            parts.append(head + _ENCODE(key) + ": ")
            _indent(value[key], inner, parts)
            head = "," + inner
        parts.append(newline + "}")
    elif kind is list:
        if not value:
            parts.append("[]")
            return
        inner = newline + "  "
        if all(type(item) is str for item in value):
            parts.append("[" + inner + ("," + inner).join(map(_ENCODE, value)) + newline + "]")
            return
        head = "[" + inner
        for item in value:
            parts.append(head)
            _indent(item, inner, parts)
            head = "," + inner
        parts.append(newline + "]")
    elif value is None:
        parts.append("null")
    elif kind is bool:
        parts.append("true" if value else "false")
    elif kind is int:
        parts.append(int.__repr__(value))
    elif kind is float and value == value and value not in (_INFINITY, -_INFINITY):
        parts.append(float.__repr__(value))
    else:
        raise _NotPlain  # nan, a tuple, a subclass: json.dumps says (or raises) what it does


_INFINITY = float("inf")


def renamed(snapshot: Snapshot | Document, name: str) -> Snapshot | Document:
    """``snapshot`` under another name."""
    if isinstance(snapshot, dict):
        return {**snapshot, "name": name}
    return snapshot.model_copy(update={"name": name})


# A file larger than this holds more packages than a process builds directly (and its
# text parsed twice, by json and then by pydantic, cost twice pydantic's one pass).
_DIRECT_TEXT = 2 << 20


def document_of(text: str, *, source: str) -> Document | None:
    """The snapshot in ``text`` as the document its file holds, where nothing but json and
    fits() is needed to vouch for it (this envguard's major version, a model loads()
    would build directly: snapshots.document.vouched); None otherwise, and loads() then
    builds its model or says what is wrong. A newer minor's note is said, as loads()
    says it."""
    from envguard.snapshots import document

    if suspect_numbers(text) or len(text) > _DIRECT_TEXT or not document.building_directly():
        return None
    try:
        data = json_loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        return None
    data, note = _read_past(data, source=source)
    if not document.vouched(data):
        return None
    if note is not None:
        notices.say(note)
    return data


def loads(text: str, *, source: str) -> Snapshot:
    """A Snapshot from JSON text; SnapshotError naming ``source`` when it is not one."""

    from envguard.snapshots import document
    from envguard.snapshots.models import Snapshot

    # The fast path first: pydantic parses and validates in one pass, or, while this
    # process builds models directly (snapshots.document.typed), json and fits() do.
    # A newer minor version's note is said once the file reads: never before its error.
    note: str | None = None
    try:
        if suspect_numbers(text):
            snap = None  # a number json_loads below may refuse: said, never a traceback
        elif document.building_directly() and len(text) <= _DIRECT_TEXT:
            data = json_loads(text)
            if isinstance(data, dict) and data.get("schema_version") == SCHEMA_VERSION:
                data, note = _read_past(data, source=source)
            snap = document.typed(data) if isinstance(data, dict) else None
        else:
            snap = Snapshot.model_validate_json(text)
    except (ValueError, RecursionError):  # ValidationError is a ValueError
        snap = None  # explained below, in the order a person checks
    if snap is not None and snap.schema_version <= SCHEMA_VERSION:
        if note is not None:
            notices.say(note)
        return snap
    try:
        data = json_loads(text)
    except RecursionError:
        raise SnapshotError(f"{source}: not a snapshot (JSON nested too deeply)") from None
    except ValueError as exc:
        raise SnapshotError(f"{source}: not valid JSON ({exc})") from None
    return from_data(data, source=source)


def from_data(data: object, *, source: str) -> Snapshot:
    """A Snapshot from parsed JSON; SnapshotError naming ``source`` when it is not one."""
    from pydantic import ValidationError

    from envguard.snapshots.models import Snapshot

    if not isinstance(data, dict):
        raise SnapshotError(f"{source}: not an envguard snapshot (top level is not an object)")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise SnapshotError(f"{source}: not an envguard snapshot (no schema_version)")
    if version > SCHEMA_VERSION:
        raise SnapshotError(
            f"{source}: schema_version {version} is newer than this envguard reads"
            f" ({SCHEMA_VERSION})",
            hint="upgrade envguard to read it",
        )
    data, note = _read_past(data, source=source)
    try:
        snap = Snapshot.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = field_path(first["loc"])
        raise SnapshotError(f"{source}: invalid snapshot at {where}: {first['msg']}") from None
    if note is not None:
        notices.say(note)
    return snap


def read_past_newer(data: dict[str, object], *, source: str) -> dict[str, object]:
    """``data`` without the fields this envguard does not know, when a newer envguard of
    the same major version wrote it (a larger ``schema_minor``): said once, in a note."""
    known, note = _read_past(data, source=source)
    if note is not None:
        notices.say(note)
    return known


def _read_past(data: dict[str, object], *, source: str) -> tuple[dict[str, object], str | None]:
    """read_past_newer's ``data`` and the note to say once the file reads (None: none)."""
    # The generated shape (and tempfile, below) load when a file is read (or written), not
    # with this module: `snapshot` and `diff` import it before their probe starts.
    from envguard.snapshots import shape

    minor = data.get("schema_minor")
    if type(minor) is not int or minor <= shape.SCHEMA_MINOR:
        return data, None  # a field this envguard should know and does not is an error
    ignored: dict[str, str] = {}  # each field's path -> how the note names it
    known = _known(data, "Snapshot", "", ignored)
    if not ignored:
        return known, None  # type: ignore[return-value]
    count, names = len(ignored), list(dict.fromkeys(ignored.values()))
    listed = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    said = str(minor) if minor < 10**12 else str(minor)[:12] + "..."  # up to 4300 digits
    note = (
        f"{source}: written by a newer envguard (schema {SCHEMA_VERSION}.{said}; this one"
        f" reads {SCHEMA_VERSION}.{shape.SCHEMA_MINOR}): {count} field"
        f"{'' if count == 1 else 's'} ignored ({listed})"
    )
    return known, note  # type: ignore[return-value]


def _known(value: object, model: str, where: str, ignored: dict[str, str]) -> object:
    from envguard.snapshots import shape

    if type(value) is not dict:
        return value
    fields, nested = shape.FIELDS[model], shape.NESTED.get(model, {})
    out = {}
    for key, item in value.items():
        if key not in fields:
            name = key if key.isprintable() and len(key) <= 64 else repr(key[:64])
            ignored[where + key] = where + name  # two long keys may share their first 64
            continue
        if key in nested:
            if type(item) is list:
                item = [_known(x, nested[key], f"{where}{key}[].", ignored) for x in item]
            else:
                item = _known(item, nested[key], f"{where}{key}.", ignored)
        out[key] = item
    return out


def resolve(ref: str, *, root: Path | None = None) -> Path:
    """A snapshot path from a path or a name in snapshots/."""
    root = Path.cwd() if root is None else root
    path = Path(ref).expanduser()
    if path.is_file():
        return path
    if _NAME.match(ref) and own_folder(root / SNAPSHOT_DIR, create=False) is not None:
        for candidate in (root / SNAPSHOT_DIR / f"{ref}.json", root / SNAPSHOT_DIR / ref):
            if candidate.is_file():
                return candidate
    raise SnapshotError(f"{ref}: no such snapshot file or name in {SNAPSHOT_DIR}/")


def read(path: Path) -> str:
    """A snapshot file's text; SnapshotError naming it when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SnapshotError(
            f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})"
        ) from None


def load(ref: str | Path, *, root: Path | None = None) -> Snapshot:
    """Load a snapshot by path or name."""
    path = resolve(str(ref), root=root)
    return loads(read(path), source=str(path))


def expand(refs: list[str]) -> list[Path]:
    """Snapshot files from paths, names and folders (each folder's *.json, sorted)."""
    paths: list[Path] = []
    for ref in refs:
        path = Path(ref)
        if path.is_dir():
            found = sorted(p for p in path.glob("*.json") if p.is_file())
            if not found:
                raise UsageError(f"{ref}: no *.json snapshots in this folder")
            paths += found
        else:
            paths.append(resolve(ref))
    return paths


@dataclass(frozen=True)
class Listed:
    """One file of snapshots/: its snapshot, or why it could not be read."""

    path: Path
    snapshot: Snapshot | None = None
    error: str | None = None


def listing(*, root: Path | None = None) -> list[Listed]:
    """Every snapshot in snapshots/, newest run first (by `created`), unreadable ones last."""
    rows = []
    for path in list_snapshots(root=root):
        try:
            rows.append(Listed(path, load(path)))
        except SnapshotError as exc:
            rows.append(Listed(path, error=exc.message))
    # A clone resets file times: order by when each run was recorded.
    rows.sort(
        key=lambda r: r.snapshot.created.timestamp() if r.snapshot else float("-inf"),
        reverse=True,
    )
    return rows


def default_path(name: str, *, root: Path | None = None) -> Path:
    """Where a snapshot named ``name`` is written by default."""
    return (Path(SNAPSHOT_DIR) if root is None else root / SNAPSHOT_DIR) / f"{name}.json"


def default_folder(*, root: Path | None = None, create: bool = True) -> Path | None:
    """snapshots/ opened as envguard's own folder (owned.own_folder: a link, a file or
    another user's folder is an error, never followed): made when ``create``."""
    return own_folder((Path.cwd() if root is None else root) / SNAPSHOT_DIR, create=create)


def list_snapshots(*, root: Path | None = None) -> list[Path]:
    """Snapshot files in snapshots/, newest modification first."""
    folder = default_folder(root=root, create=False)
    if folder is None:
        return []
    files = [p for p in folder.glob("*.json") if p.is_file()]
    return sorted(files, key=lambda p: (p.stat().st_mtime, p.name), reverse=True)


def newest(*, root: Path | None = None) -> Path:
    """The snapshot created last (by its `created` field: a clone resets file times)."""
    from datetime import datetime, timezone

    best: tuple[datetime, Path] | None = None
    for path in list_snapshots(root=root):
        try:  # plain JSON: no model needed to read one timestamp
            raw = json_loads(read(path))
            created = datetime.fromisoformat(str(raw["created"]).replace("Z", "+00:00"))
        except (SnapshotError, ValueError, KeyError, TypeError, RecursionError):
            continue  # an unreadable one is never "the newest good run"
        if created.tzinfo is None:
            created = created.replace(tzinfo=timezone.utc)
        if best is None or created > best[0]:
            best = (created, path)
    if best is None:
        raise UsageError(
            f"no snapshot in {SNAPSHOT_DIR}/", hint="run `envguard snapshot` after a good run"
        )
    return best[1]


class TargetExists(UsageError):
    """The file to write exists and --force was not given."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            f"{path}: already exists",
            hint="choose another name or path (--force replaces it, if it is yours to replace)",
        )
        self.path = path


def check_target(path: Path, *, force: bool) -> None:
    """Refuse to overwrite ``path`` unless forced (checked again at the rename); a device or
    a pipe is written into, not overwritten."""
    if path.exists() and not force and not _is_stream(path):
        raise TargetExists(path)


def write_atomic(path: Path, text: str, *, force: bool) -> None:
    """Write ``text`` to ``path`` via a temp file and rename; never a half-written file.

    A full disk, a read-only file system or a folder in the way is one ActionError line,
    and nothing is left behind."""
    if path.is_dir():
        raise UsageError(f"{path}: is a directory", hint=f"name a file, e.g. {path}/snap.json")
    if _is_stream(path):  # /dev/null, /dev/stdout, a pipe: written into, never replaced
        _write_stream(path, text)
        return
    check_target(path, force=force)
    try:
        _write_atomic(path, text, force=force)
    except OSError as exc:
        raise ActionError(f"{path}: cannot write ({exc.strerror or exc})") from None


def _is_stream(path: Path) -> bool:
    """``path`` leads (through symlinks) to something that is written into, not replaced:
    a character device or a FIFO. A rename over it would put a file where /dev/null or
    /dev/stdout was (as root, for everyone); any other non-regular file is refused."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        where = os.path.realpath(path)
        # /dev/stdout with stdout closed leads into /proc; a missing /dev/null: never a file
        # put in their place (a new file in /dev/shm is fine).
        if where.startswith("/proc/") or os.path.dirname(where) == "/dev":
            raise UsageError(f"{path}: {where} is not there (standard output closed?)") from None
        return False  # nothing there (or a dangling link): the atomic write decides
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return True
    if not stat.S_ISREG(mode):
        raise UsageError(f"{path}: not a regular file, a pipe or a character device")
    return False


#: How long a named pipe may go without a reader before writing to it is an error: the
#: reader (``cat pipe &``, ``gzip < pipe``) is often still starting when envguard opens it.
READER_WAIT_SECONDS = 5.0


def _write_stream(path: Path, text: str) -> None:
    """``text`` into a device or pipe, as the shell's ``>`` would, except that a pipe nobody
    opens for reading within READER_WAIT_SECONDS is an error, not a wait forever."""
    import fcntl
    import stat
    import time

    deadline = time.monotonic() + READER_WAIT_SECONDS
    pause = 0.001
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
            break
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise ActionError(f"{path}: cannot write ({exc.strerror or exc})") from None
            if time.monotonic() >= deadline:
                raise UsageError(
                    f"{path}: no process reads this pipe"
                    f" (waited {READER_WAIT_SECONDS:g} s for a reader)"
                ) from None
            time.sleep(pause)  # a reader still starting; poll, since open() cannot time out
            pause = min(pause * 2, 0.05)
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
        os.close(fd)  # swapped for a file (or a link to one) meanwhile: never written into
        raise UsageError(f"{path}: no longer a pipe or a device (it changed while opened)")
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        with os.fdopen(fd, "w", encoding="utf-8", closefd=False) as fh:
            fh.write(text)
    except OSError as exc:
        raise ActionError(f"{path}: cannot write ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def _write_atomic(path: Path, text: str, *, force: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _new_beside(path)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 would hide a shared snapshot
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if force:
            os.replace(tmp, path)
        else:
            try:  # link() refuses an existing target: no race with a concurrent writer
                os.link(tmp, path)
            except FileExistsError:
                raise TargetExists(path) from None
            except OSError:
                os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


_NEW_FILE = (  # mkstemp's flags
    os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
)


def _new_beside(path: Path) -> tuple[int, str]:
    """A new file of mode 0600 beside ``path``, under a random name (.NAME.RANDOM.tmp, as
    long as mkstemp's), as tempfile.mkstemp makes one (tempfile loads random: 2.5 ms of
    every snapshot's start)."""
    for _ in range(100):
        tmp = os.path.join(path.parent, f".{path.name}.{os.urandom(4).hex()}.tmp")
        try:
            return os.open(tmp, _NEW_FILE, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no temporary name was free", str(path.parent))
