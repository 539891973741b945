"""The GPU libraries as their bytes say: the version inside each file against its
distribution's metadata, and the copy the loader gives torch.

Two kinds of finding. What the live side says of itself: a file whose embedded version is
not its distribution's (a clobbered libnccl.so.2), a wheel's library that torch will not
load because the loader finds another copy first. And what moved from the good snapshot:
the version inside a file, the copy torch loads. A finding the good snapshot already had
is info (the good run ran so: an untouched venv matches its own snapshot), a new one
critical.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envguard.compare.sections.base import Section
from envguard.compare.severity import Severity

if TYPE_CHECKING:
    from envguard.compare.engine import Collector
    from envguard.compare.models import Change
    from envguard.snapshots.models import Library, Snapshot


def agrees(embedded: str, metadata: str) -> bool:
    """The embedded version's release numbers lead the metadata's ("2.30.7+cuda13.3" and
    "2.30.7"; a SONAME's "13" and "13.0.96")."""
    try:
        ours, theirs = Version(embedded).release, Version(metadata).release
    except InvalidVersion:
        return embedded == metadata
    return theirs[: len(ours)] == ours


def describes(dist: str) -> bool:
    """Whether a distribution's version is the version of the libraries it ships. NVIDIA's
    library wheels (nvidia-nccl-cu13 2.30.7 ships NCCL 2.30.7) are versioned by their
    library; a package that bundles a copy (triton 3.8.0 ships CUPTI 13 and 12, torch its
    own libc10_cuda) is versioned by itself, and its number says nothing of the copy's."""
    return canonicalize_name(dist).startswith("nvidia-")


def mismatch(lib: Library) -> str | None:
    """ "libnccl.so.2: nvidia-nccl-cu13 says 2.30.7, the file says 2.28.9", or None."""
    if lib.dist is None or lib.metadata_version is None or lib.embedded_version is None:
        return None
    if not describes(lib.dist):
        return None
    embedded = lib.embedded_version
    if lib.version_source == "soname":
        # A SONAME carries the major alone, sometimes with a fixed ".0": CUDA 11's
        # libcudart.so.11.0 is the soname of every nvidia-cuda-runtime-cu11 11.x.
        embedded = embedded.split(".", 1)[0]
    if agrees(embedded, lib.metadata_version):
        return None
    also = f" (also claimed by {', '.join(lib.also_claimed_by)})" if lib.also_claimed_by else ""
    return (
        f"{lib.name}: {lib.dist} says {lib.metadata_version},"
        f" the file says {lib.embedded_version}{also}"
    )


def shadowed(lib: Library) -> str | None:
    """ "torch will load /usr/lib/.../libnccl.so.2 (2.21.5), not the wheel's", or None."""
    if lib.dist is None or not lib.path.startswith("nvidia/"):
        return None
    if lib.mapped is not None:  # what the running process really had: no model needed
        if lib.mapped == lib.path:
            return None
        return f"the running process has {lib.mapped} mapped, not the wheel's {lib.path}"
    if lib.loader_pick is None or lib.loader_pick == lib.path:
        return None
    version = lib.loader_pick_version or "version unknown"
    return (
        f"torch will load {lib.loader_pick} ({version}, by {lib.loader_pick_why}),"
        f" not the wheel's {lib.path}"
    )


def compare(b: Collector, e: Snapshot, a: Snapshot) -> None:
    before = {lib.path: lib for lib in e.libraries}
    for lib in a.libraries:
        old = before.get(lib.path)
        for kind, said in (("mismatch", mismatch), ("shadowed", shadowed)):
            message = said(lib)
            if message is None:
                continue
            known = old is not None and said(old) == message
            b.finding(
                kind,
                lib.path,
                expected=None if old is None else _facts(old, kind),
                actual=_facts(lib, kind),
                message=message,
                known=known,
            )
    if not e.libraries:
        return  # a snapshot taken before libraries were recorded: nothing to compare with
    after = {lib.path: lib for lib in a.libraries}
    for path, old in sorted(before.items()):
        new = after.get(path)
        if new is None:
            b.add(
                "removed",
                path,
                expected=old.embedded_version,
                severity=Severity.warning,
                message=f"{old.name} ({path}) is gone",
            )
            continue
        if new.embedded_version != old.embedded_version or (new.error and not old.error):
            b.add(
                "changed",
                path,
                expected=old.embedded_version,
                actual=new.embedded_version,
                severity=Severity.critical,
                message=f"{new.name} ({path}): the file says {_said(old)} -> {_said(new)}",
            )
        # The good run's process, when `snapshot --pid` saw it, says what really loaded.
        ran = old.mapped or old.loader_pick
        now = new.mapped or new.loader_pick
        if now != ran:
            soname = new.soname or new.name
            message = (
                f"the good run had {soname} mapped from {ran}; torch would load {now} now"
                if old.mapped
                else f"torch loads {soname} from {ran or 'nowhere'} -> {now or 'nowhere'}"
            )
            b.add(
                "pick",
                path,
                expected=ran,
                actual=now,
                severity=Severity.critical,
                message=message,
            )
    for path in sorted(after.keys() - before.keys()):
        b.add(
            "added",
            path,
            actual=after[path].embedded_version,
            severity=Severity.info,
            message=f"{after[path].name} ({path}) is new",
        )


def _facts(lib: Library, kind: str) -> str | None:
    return lib.embedded_version if kind == "mismatch" else lib.loader_pick


def _said(lib: Library) -> str:
    if lib.error:
        return f"nothing readable ({lib.error})"
    return lib.embedded_version or "no version"


def identity(snap: Snapshot) -> Iterator[tuple[str, str]]:
    for lib in snap.libraries:
        yield f"library {lib.path}", lib.embedded_version or "unknown"
        if lib.loader_pick is not None:
            yield f"library {lib.path} loads", lib.loader_pick


def restore_hint(change: Change, snapshot: Snapshot) -> str | None:
    lib = next((x for x in snapshot.libraries if x.path == change.name), None)
    if change.kind == "shadowed" and "by LD_LIBRARY_PATH" in change.message:
        return f"{change.message}; take that folder out of LD_LIBRARY_PATH"
    if change.kind in ("mismatch", "changed") and lib is not None and lib.dist is not None:
        pin = shlex.quote(f"{lib.dist}=={lib.metadata_version}")
        return (
            f"{change.message}; reinstall it: uv pip install --reinstall-package {lib.dist} {pin}"
        )
    return None


SECTION = Section(
    name="libraries",
    title="GPU libraries",
    compare=compare,
    identity=identity,
    restore_hint=restore_hint,
)
