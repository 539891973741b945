"""Taking a snapshot and keeping its file: snapshot(), snapshot_document(), save(),
load(), newest(), list_snapshots(); Measure, where and how to measure.

The probe `envguard snapshot` and `envguard diff` need is started before this module loads
(api.early); the rest of what a snapshot needs (pydantic) loads once the probe runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from envguard.api._shared import settings
from envguard.snapshots import store
from envguard.snapshots.measure import Measure as Measure  # where and how: the API's too
from envguard.snapshots.measure import capture_request
from envguard.snapshots.request import start_capture

TYPE_CHECKING = False  # typing is not loaded for a command's start

if TYPE_CHECKING:
    from typing import Any

    from envguard.snapshots.document import Document
    from envguard.snapshots.models import MetricValue, Snapshot
    from envguard.snapshots.request import CaptureRequest, StartedCapture
    from envguard.snapshots.store import Listed


def snapshot(
    *,
    python: str | Path | None = None,
    name: str | None = None,
    repos: Sequence[str | Path] = (),
    files: Sequence[str] = (),
    caches: Sequence[str] = (),
    metrics: Mapping[str, MetricValue] | None = None,
    note: str | None = None,
    via: str | Sequence[str] | None = None,
    timeout: float | None = 120.0,
    command: Sequence[str] | None = None,
    root: str | Path | None = None,
    deep: bool = False,
    pid: int | None = None,
    measure: Measure | None = None,
) -> Snapshot:
    """Measure an environment: the interpreter (default: $VIRTUAL_ENV, ./.venv, python3),
    its packages, torch's build, the GPU, git repos, files, caches and environment (``pid``:
    a running process whose mapped GPU libraries are recorded too). Installed files are
    checked against each distribution's RECORD: the files that run by size (and hash when
    written after the install); ``deep``: every file hashed. ``measure`` holds where and
    how to measure in one value (python, via, timeout, root, deep, pid: give it or them)."""
    started = start_capture(_request(**locals()))
    # The probe runs while the models (pydantic) load: that import is most of the start-up.
    from envguard.snapshots.capture import finish_capture

    return finish_capture(started)


def fit(
    *,
    python: str | Path | None = None,
    via: str | Sequence[str] | None = None,
    timeout: float | None = 120.0,
    measure: Measure | None = None,
    overlay: Path | None = None,
) -> Snapshot:
    """Measure the environment (as snapshot() does) for its fit: whether each compiled
    extension that takes torch's or CUDA's symbols will load, from its files and the
    libraries the loader will give it (``.fit`` of the result; nothing is imported). The
    repos, compile caches and installed files a snapshot also measures are left out.
    ``overlay``: a site-packages folder read ahead of the environment's own (guard's
    wheels an install would bring, unpacked): the environment as the install would leave
    it, its packages and torch's build included; the fingerprint cache is not used."""
    from dataclasses import replace

    where = settings(measure, python=python, via=via, timeout=timeout)
    request = capture_request(where, name="fit", command=("envguard", "fit"))
    # With an overlay, the RECORDs are read for who claims what ("claims": no file checked):
    # an incoming wheel's file over one a distribution the install keeps claims.
    verify = "off" if overlay is None else "claims"
    request = replace(
        request, default_caches=False, include_cwd_repo=False, verify=verify, overlay=overlay
    )
    started = start_capture(request)
    from envguard.snapshots.capture import finish_capture

    return finish_capture(started)


def snapshot_document(
    *,
    python: str | Path | None = None,
    name: str | None = None,
    repos: Sequence[str | Path] = (),
    files: Sequence[str] = (),
    caches: Sequence[str] = (),
    metrics: Mapping[str, MetricValue] | None = None,
    note: str | None = None,
    via: str | Sequence[str] | None = None,
    timeout: float | None = 120.0,
    command: Sequence[str] | None = None,
    root: str | Path | None = None,
    deep: bool = False,
    pid: int | None = None,
    measure: Measure | None = None,
    meanwhile: Callable[[], object] | None = None,
) -> Document:
    """snapshot(), as the JSON document its file holds (``Snapshot.model_validate`` of it
    is snapshot()'s result): checked as the model checks it, without loading pydantic
    where the check can vouch for it. What `envguard snapshot` writes. ``meanwhile`` runs
    while the probe works (the caller loads what it needs next: save()'s signing)."""
    options = dict(locals())
    del options["meanwhile"]
    started = start_capture(_request(**options))
    from envguard.snapshots.capture import finish_document

    return finish_document(started, meanwhile=meanwhile)


def start_document(*, python: str | Path, name: str) -> StartedCapture:
    """snapshot_document(python=..., name=...) started: its probe runs while the caller
    works; ``finish_document()`` (envguard.snapshots.capture) waits for it, ``cancel()``
    stops it."""
    return start_capture(capture_request(Measure(python=python), name=name))


def _request(
    *,
    measure: Measure | None,
    name: str | None,
    repos: Sequence[str | Path],
    files: Sequence[str],
    caches: Sequence[str],
    metrics: Mapping[str, MetricValue] | None,
    note: str | None,
    command: Sequence[str] | None,
    **keywords: Any,  # where and how to measure, as the API took it before measure=
) -> CaptureRequest:
    """snapshot()'s request from its arguments (``locals()``)."""
    return capture_request(
        settings(measure, **keywords), name=name, repos=repos, files=files, caches=caches,
        metrics=metrics, note=note, command=command,
    )  # fmt: skip


def save(
    snap: Snapshot | Document,
    path: str | Path | None = None,
    *,
    force: bool = False,
    unique: bool = False,
    sign: bool = False,
) -> Path:
    """Write ``snap`` (a Snapshot, or snapshot_document()'s document) atomically (default:
    snapshots/NAME.json; ``{host}`` in the path is the snapshot's host); never overwrites
    without ``force``. Returns the path written. ``unique`` (a default, timestamped name):
    a name taken meanwhile gets -2, -3, ... instead of an error, so two snapshots in one
    second never collide. ``sign``: signed with this user's key (snapshots/signing.py),
    only for a snapshot this process measured: a signed one's variables are restored as
    written, so signing one read from a file would vouch for whoever wrote that file."""
    name, host = (snap["name"], snap["host"]) if isinstance(snap, dict) else (snap.name, snap.host)
    if path is None and unique and not force:
        for n in range(1, 1000):
            named = snap if n == 1 else store.renamed(snap, f"{name}-{n}")
            try:
                return save(named, force=False, sign=sign)
            except store.TargetExists:
                continue
    if path is None:
        store.default_folder()  # snapshots/ made or opened, never followed
    target = store.default_path(name) if path is None else Path(path)
    if "{host}" in str(target):
        from envguard.snapshots.hosts import check_host  # threads: off the start-up path

        target = Path(str(target).replace("{host}", check_host(host, source="the snapshot's host")))
    if sign:
        from envguard.snapshots import signing  # hmac and secrets: not before the probe starts

        snap = signing.signed(snap)
    store.write_atomic(target, store.dumps(snap), force=force)
    return target


def default_path(name: str) -> Path:
    """Where a snapshot named ``name`` is saved by default: snapshots/NAME.json."""
    return store.default_path(store.validate_name(name))


def check_writable(path: str | Path, *, force: bool = False) -> None:
    """UsageError now, before a slow capture, if ``path`` exists and ``force`` is not set."""
    store.check_target(Path(path), force=force)


def load(ref: str | Path) -> Snapshot:
    """A snapshot by path or by name in snapshots/, validated in full."""
    return store.load(ref)


def newest() -> Path:
    """The snapshot file in snapshots/ whose run was recorded last."""
    return store.newest()


def list_snapshots() -> list[Listed]:
    """Every snapshot in snapshots/, newest run first; unreadable ones last, with why."""
    return store.listing()
