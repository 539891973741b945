"""The Python interpreter: implementation, version, machine, libc, where it lives."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from envguard.compare.sections.base import Section
from envguard.compare.severity import Severity

if TYPE_CHECKING:
    from envguard.compare.engine import Collector
    from envguard.snapshots.models import Snapshot

C, W, I = Severity.critical, Severity.warning, Severity.info  # noqa: E741
ABSENT = "(absent)"


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def compare(b: Collector, e: Snapshot, a: Snapshot) -> None:
    ei, ai = e.interpreter, a.interpreter
    if ei.implementation != ai.implementation:
        b.add(
            "implementation",
            "implementation",
            expected=ei.implementation,
            actual=ai.implementation,
            severity=C,
            message=f"Python implementation {ei.implementation} -> {ai.implementation}",
        )
    if ei.version != ai.version:
        minor = _minor(ei.version) != _minor(ai.version)
        b.add(
            "version",
            "python",
            expected=ei.version,
            actual=ai.version,
            severity=C if minor else W,
            message=f"Python {ei.version} -> {ai.version}"
            + (": a different minor version, every compiled wheel differs" if minor else ""),
        )
    if ei.machine != ai.machine:
        b.add(
            "machine",
            "machine",
            expected=ei.machine,
            actual=ai.machine,
            severity=C,
            message=f"machine {ei.machine} -> {ai.machine}",
        )
    if ei.libc != ai.libc:
        b.add(
            "libc",
            "libc",
            expected=ei.libc,
            actual=ai.libc,
            severity=W,
            message=f"libc {ei.libc} -> {ai.libc}",
        )
    if ei.prefix != ai.prefix:
        b.add(
            "prefix",
            "prefix",
            expected=ei.prefix,
            actual=ai.prefix,
            severity=I,
            message=f"a different environment path: {ei.prefix} -> {ai.prefix}",
        )


def identity(snap: Snapshot) -> Iterator[tuple[str, str]]:
    i = snap.interpreter
    yield "python", f"{i.implementation} {i.version}"
    yield "machine", i.machine
    yield "libc", i.libc or ABSENT


SECTION = Section(
    name="interpreter", title="Python interpreter", compare=compare, identity=identity
)
