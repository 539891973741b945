"""Measure the live side of a diff exactly as a snapshot was measured, and decide what of
the snapshot may be trusted to do so (a snapshot may come from a pull request).

`envguard diff` starts the probe from the snapshot's raw JSON, before pydantic has loaded,
then validates the file in full while the probe runs; an invalid file stops the probe.

The trust rule for the interpreter: envguard never runs one that only a file names. It
runs the user's ``--python``, the default target (`$VIRTUAL_ENV`, ``./.venv``, python3 on
PATH, as ``snapshot`` picks), or the snapshot's recorded interpreter only once the file
validated in full, and only when recorded_python() (here, or the far side of --via) finds
a real interpreter (a program in a Python's layout, not a script) that this user or root
owns, that nobody else can change, outside the checkout. Only the first two may start
before validation (the early start, prestart_like).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from envguard.errors import UsageError
from envguard.lifecycle import validate_meanwhile
from envguard.probe.interpreters import resolve_python
from envguard.reading import json_loads, named_by
from envguard.snapshots.measure import VIA_TIMEOUT, Measure
from envguard.snapshots.repos import find_work_tree
from envguard.snapshots.request import CaptureRequest, StartedCapture, start_capture, start_early

TYPE_CHECKING = False  # typing loads once the probe runs (api.early)
if TYPE_CHECKING:
    from typing import Any

    from envguard.snapshots.document import Document
    from envguard.snapshots.models import Snapshot


@dataclass(frozen=True)
class Recorded:
    """What a snapshot says about how it was measured: enough to measure again.

    Built from a validated Snapshot, or straight from its JSON so that `envguard diff` can
    start the probe before pydantic loads (the file is still validated in full after).
    """

    name: str
    executable: str
    via: str | None = None
    repos: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    # Each file's path in its work tree (or --root), None where not recorded: where it is
    # read when its checkout lies elsewhere now.
    rels: tuple[str | None, ...] = ()
    roots: tuple[str | None, ...] = ()  # each file's work tree (or --root) as recorded
    caches: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, snapshot: Snapshot) -> Recorded:
        return cls(
            name=snapshot.name,
            executable=snapshot.interpreter.executable,
            via=snapshot.via,
            repos=tuple(r.path for r in snapshot.repos),
            files=tuple(f.path for f in snapshot.files),
            rels=tuple(f.rel for f in snapshot.files),
            roots=tuple(f.root for f in snapshot.files),
            caches=tuple((c.kind, c.path) for c in snapshot.caches),
        )

    @classmethod
    def from_json(cls, text: str) -> Recorded | None:
        """The same from raw JSON; None when it is not plainly shaped (validation explains)."""
        try:
            raw = json_loads(text)
        except (ValueError, RecursionError):
            return None
        return cls.from_data(raw)

    @classmethod
    def from_data(cls, raw: Any) -> Recorded | None:
        """The same from parsed JSON (a snapshot's document)."""
        try:
            recorded = cls(
                name=_text(raw["name"]),
                executable=_text(raw["interpreter"]["executable"]),
                via=None if raw.get("via") is None else _text(raw["via"]),
                repos=tuple(_text(r["path"]) for r in raw.get("repos", [])),
                files=tuple(_text(f["path"]) for f in raw.get("files", [])),
                rels=tuple(
                    None if f.get("rel") is None else _text(f["rel"]) for f in raw.get("files", [])
                ),
                roots=tuple(
                    None if f.get("root") is None else _text(f["root"])
                    for f in raw.get("files", [])
                ),
                caches=tuple((_text(c["kind"]), _text(c["path"])) for c in raw.get("caches", [])),
            )
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            return None
        if any(ord(c) < 32 or c == "\x7f" for c in recorded.name + (recorded.via or "")):
            return None  # not one line: let full validation say so
        return recorded


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(value)
    return value


def request_like(
    recorded: Recorded,
    *,
    python: Path | str,
    python_label: str | None = None,
    cwd: Path | None = None,
    via: tuple[str, ...] = (),
    allow: tuple[str, ...] = (),
    root: str | None = None,
    timeout: float = VIA_TIMEOUT,
) -> CaptureRequest:
    """A request that measures the live side exactly as the snapshot was measured. The
    files, caches and repos it names are confined (envguard.confine) to the working
    directory, its work tree, the target's cache folders and ``allow``."""
    here = cwd or Path.cwd()
    reads = file_locations(recorded, root=root, cwd=here, remote=bool(via))
    moved = moved_repos(recorded, root)
    return CaptureRequest(
        python=python,
        python_label=python_label,
        via=via,
        name=recorded.name + "-live",
        repos=tuple(Path(moved.get(r, r)) for r in recorded.repos),
        repo_keys={
            spelling: recorded_path
            for recorded_path, now in moved.items()
            for spelling in {now, os.path.realpath(now) if not via else now}
        },
        files=reads,
        file_keys=recorded.files if reads != recorded.files else (),
        caches=recorded.caches,
        default_caches=False,
        include_cwd_repo=False,
        cwd=here,
        strict=False,
        confined=True,
        allow=allow,
        # A far side that never answers must not stall the gate (as snapshot --via).
        timeout=timeout if via else None,
    )


def file_locations(
    recorded: Recorded, *, root: str | None, cwd: Path, remote: bool
) -> tuple[str, ...]:
    """Where each recorded file is read now: below ``root`` (--root, the checkout's place
    now) by its path in its work tree; else where it was, if it is there (or remote); else
    below the work tree around ``cwd``, when that holds it."""
    top = None if remote or root is not None else find_work_tree(cwd)
    out = []
    rels = recorded.rels if len(recorded.rels) == len(recorded.files) else ()
    for i, path in enumerate(recorded.files):
        rel = rels[i] if rels else None
        if rel is None or not _plain_rel(rel):
            out.append(path)
        elif root is not None:
            out.append(os.path.join(root, rel))
        elif remote or os.path.lexists(path) or top is None:
            out.append(path)
        else:
            out.append(str(top / rel))
    return tuple(out)


def moved_repos(recorded: Recorded, root: str | None) -> dict[str, str]:
    """{recorded repo: where it is read now}: with --root, the work tree that held the
    tracked files (or the only repo recorded) is the checkout at ``root``."""
    if root is None:
        return {}
    holding = {r for r in recorded.roots if r is not None} & set(recorded.repos)
    if not holding and len(recorded.repos) == 1:
        holding = set(recorded.repos)
    return {r: root for r in holding} if len(holding) == 1 else {}


def _plain_rel(rel: str) -> bool:
    """A path below a folder: relative, no '..' (confinement still applies to the result)."""
    return bool(rel) and not os.path.isabs(rel) and ".." not in Path(rel).parts


_PYTHON_NAME = re.compile(r"^(python|pypy)[0-9.]*$")


def recorded_python(
    executable: str,
    *,
    remote: bool = False,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
    source: str | None = None,
) -> Path:
    """The interpreter a snapshot names, if it is safe to run without the user naming it
    (call it only once the snapshot validated in full).

    A snapshot may come from a pull request, so the path it records must look like a
    Python; locally it must be the interpreter envguard would pick by default anyway, or
    lie outside the current directory and the folder of the snapshot file ``source`` (and
    their git work trees: checkouts an attacker could fill), in no place another user owns
    or could write to (confine.unsafe_place), and be a real interpreter, told without
    running it (confine.not_python): a `#!/bin/sh` script named ``python3`` is refused.
    ``remote``: only the path's shape here; the far side checks the rest (live_request).
    """
    path = Path(executable)
    hint = "pass --python PATH to say which interpreter to measure"
    if (
        not path.is_absolute()
        or not _PYTHON_NAME.match(path.name)
        or ".." in path.parts
        or path.parts[1:2] == ("proc",)
    ):
        raise UsageError(
            f"{executable!r}: the snapshot's interpreter is not a plain python path", hint=hint
        )
    if remote:
        return path
    # A venv in a folder named with U+202E was recorded as its escape: the folder it names.
    path = Path(named_by(executable))
    if not path.exists():
        raise UsageError(f"{path}: the snapshot's interpreter no longer exists", hint=hint)
    unsafe = _unsafe_place(path)
    if unsafe is not None:
        raise UsageError(
            f"{path}: the snapshot names an interpreter in {unsafe}",
            hint=f"pass --python {path} if you trust it",
        )
    cwd = (Path.cwd() if cwd is None else cwd).absolute()
    if _is_default(str(path), environ=environ, cwd=cwd):
        return path  # what `envguard snapshot` measures here anyway
    # The places a checkout (a pull request) can fill: this directory, the snapshot file's
    # folder and their git work trees, compared on resolved paths so a symlinked spelling
    # cannot slip past.
    roots = set()
    places = [cwd]
    if source:
        folder = Path(source).absolute().parent
        # snapshots/ is the conventional folder: the project around it is the checkout.
        places += [folder, folder.parent] if folder.name == "snapshots" else [folder]
    for place in places:
        roots.add(os.path.realpath(place))
        top = find_work_tree(place)
        if top is not None:
            roots.add(os.path.realpath(top))
    spellings = {os.path.normpath(os.path.abspath(path)), os.path.realpath(path)}
    inside = any(s == r or s.startswith(r.rstrip("/") + "/") for s in spellings for r in roots)
    if inside:
        raise UsageError(
            f"{path}: the snapshot names an interpreter inside this checkout",
            hint=f"pass --python {path} if you trust it",
        )
    why = not_python(str(path))
    if why is not None:
        raise UsageError(f"{path}: the snapshot's interpreter is {why}; not run", hint=hint)
    return path


def _unsafe_place(path: Path) -> str | None:
    from envguard.confine import unsafe_place

    return unsafe_place(str(path))


def not_python(path: str) -> str | None:
    """Why ``path`` is no real Python interpreter (confine.not_python), or None."""
    from envguard.confine import not_python as why

    return why(path)


def live_request(
    recorded: Recorded, measure: Measure, *, source: str | None = None
) -> CaptureRequest:
    """How to measure the live side as ``recorded`` was measured: the user's python and via
    (``measure``) win; otherwise the snapshot's interpreter, if recorded_python() trusts it
    (and with via, the far side's own check: _trusted_there). ``recorded`` must come from a
    snapshot that validated in full unless ``measure.python`` is given or its interpreter
    is the default target (_runnable_before_validation). A `via` stored in a snapshot is
    never run. The rest of ``measure``: its timeout for each call through via, allow, root,
    and deep (every installed file hashed against its RECORD)."""
    measure = measure.checked()
    python = None if measure.python is None else str(measure.python)
    timeout = VIA_TIMEOUT if measure.timeout is None else measure.timeout
    root = None if measure.root is None else str(measure.root)
    if measure.remote:
        prefix = measure.prefix()
        remote = python or str(recorded_python(recorded.executable, remote=True))
        if python is None:  # the snapshot's choice: checked where it lives before it runs
            _trusted_there(prefix, remote, timeout=timeout)
        request = request_like(
            recorded,
            python=remote,
            via=prefix,
            allow=measure.allow,
            root=root,
            timeout=timeout,
        )
    elif recorded.via:
        raise UsageError(
            f"{recorded.name} was captured --via {recorded.via!r}",
            hint="pass --via yourself to measure that environment again",
        )
    else:
        target = (
            resolve_python(python)
            if python
            else recorded_python(recorded.executable, source=source)
        )
        label = f"--python {python}" if python else f"the snapshot's interpreter {target}"
        request = request_like(
            recorded, python=target, python_label=label, allow=measure.allow, root=root
        )
    if measure.deep:
        from dataclasses import replace

        return replace(request, verify="deep")
    return request


def _trusted_there(prefix: tuple[str, ...], executable: str, *, timeout: float) -> None:
    """Refuse a snapshot-named interpreter on the far side of ``prefix`` that could have
    been planted there (another user's, or in a folder anyone can write to), as it would
    be refused here: the far side's own python3 inspects it first. A far side that cannot
    say is a measurement that could not be made (ProbeError, exit 2), as for the probe."""
    from envguard.errors import ProbeError
    from envguard.probe.channel import NoAnswer, RemoteTarget

    hint = "pass --python PATH to say which interpreter to measure"
    try:
        answer = RemoteTarget(prefix, "python3", timeout=timeout).call(
            "unsafe_place", path=executable
        )
    except NoAnswer as exc:  # unreachable, or no python3 there
        raise ProbeError(exc.message, hint=hint) from None
    if not answer.get("ok"):
        raise ProbeError(
            f"{executable}: cannot check the snapshot's interpreter there ({answer.get('error')})",
            hint=hint,
        )
    why = answer.get("why")
    if why:
        raise UsageError(
            f"{executable}: the snapshot's interpreter is in {why} there; not run", hint=hint
        )
    fake = answer.get("not_python")
    if fake is None and "not_python" not in answer:  # a far side that does not say: refused
        fake = "not checked as a Python interpreter"
    if fake:
        raise UsageError(
            f"{executable}: the snapshot's interpreter is {str(fake)[:300]} there; not run",
            hint=hint,
        )


def _is_default(
    executable: str, *, environ: Mapping[str, str] | None = None, cwd: Path | None = None
) -> bool:
    """``executable`` is the very path envguard measures by default. Not the same binary
    through another path: a symlink elsewhere to the default's binary runs with the
    pyvenv.cfg beside the symlink, whose ``home`` may name another standard library."""
    try:
        default = resolve_python(None, environ=environ, cwd=cwd)
    except UsageError:
        return False
    return os.path.normpath(os.path.abspath(default)) == os.path.normpath(
        os.path.abspath(executable)
    )


def _runnable_before_validation(text: str, measure: Measure) -> Recorded | None:
    """What the snapshot ``text`` asks to measure, when that may start before the file is
    validated: only an interpreter the user chose (--python) or, locally, the default
    target anyway. A snapshot's own choice (also with --via and no --python: the far
    side's check runs it by name) starts after the file validated."""
    recorded = Recorded.from_json(text)
    if recorded is None or measure.python:
        return recorded
    return recorded if measure.via is None and _is_default(recorded.executable) else None


# A snapshot file larger than this is not read twice to start its probe early.
PRESTART_BYTES = 8 << 20


def prestart_like(text: str, *, source: str, python: str | None) -> None:
    """Start the probe that measure_like() of the same snapshot will ask for (locally),
    before anything else loads; measure_like() takes it over (request.start_early)."""
    measure = Measure(python=python)
    recorded = _runnable_before_validation(text, measure)
    if recorded is not None:
        start_early(live_request(recorded, measure, source=source))


def measure_like(
    text: str,
    *,
    source: str,
    measure: Measure,
    meanwhile: Callable[[], object] | None = None,
) -> tuple[Snapshot, Snapshot]:
    """(the snapshot in ``text``, the live environment measured as it was, where and how
    ``measure`` says): documents_like()'s two sides, as models. ``meanwhile`` runs once the
    probe has started and the snapshot is valid, before the wait for its answer (what
    the caller needs next loads beside the probe)."""
    from envguard.snapshots.capture import live_model

    expected, live, started = documents_like(
        text,
        source=source,
        measure=measure,
        meanwhile=None if meanwhile is None else lambda _expected: meanwhile(),
    )
    snap = _model(expected) if isinstance(expected, dict) else expected
    return snap, live_model(live, started)


def documents_like(
    text: str,
    *,
    source: str,
    measure: Measure,
    meanwhile: Callable[[Document | Snapshot], object] | None = None,
) -> tuple[Document | Snapshot, Document, StartedCapture]:
    """measure_like()'s two sides before a model of either is built (a clean diff needs
    none: compare.identical): the snapshot's document where store.document_of() vouches
    for it without pydantic (else its model), and the live side's document as measured
    (snapshots.capture.live_model() makes its model), with its capture. ``meanwhile``
    runs with the snapshot's side once it is valid, beside the probe."""
    from envguard.snapshots import store
    from envguard.snapshots.capture import finish_raw

    recorded = _runnable_before_validation(text, measure)

    def start(recorded: Recorded) -> StartedCapture:
        return start_capture(live_request(recorded, measure, source=source))

    seen: list[Document | Snapshot] = []

    def valid() -> Document | Snapshot:
        doc = store.document_of(text, source=source)
        seen.append(doc if doc is not None else store.loads(text, source=source))
        return seen[0]

    def start_valid(expected: Document | Snapshot) -> StartedCapture:
        found = Recorded.from_data(expected) if isinstance(expected, dict) else None
        if found is None:
            found = Recorded.of(expected if not isinstance(expected, dict) else _model(expected))
        return start(found)

    def finish(started: StartedCapture) -> tuple[Document, StartedCapture]:
        then = None if meanwhile is None else lambda: meanwhile(seen[0])
        return finish_raw(started, meanwhile=then), started

    expected, (live, started) = validate_meanwhile(
        lambda: start(recorded) if recorded is not None else None,
        valid,
        start_valid=start_valid,
        finish=finish,
    )
    return expected, live, started


def _model(doc: Document) -> Snapshot:
    from envguard.snapshots.document import built

    return built(doc)
