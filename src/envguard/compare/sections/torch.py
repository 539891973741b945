"""torch's build: CUDA/HIP, git version, debug flag and the GPU libraries it runs on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from envguard.compare.sections.base import Section
from envguard.compare.sections.interpreter import ABSENT
from envguard.compare.severity import Severity

if TYPE_CHECKING:
    from envguard.compare.engine import Collector
    from envguard.snapshots.models import Snapshot

# TorchBuild's fields past the version, with the words people use for them.
BUILD_FIELDS = {
    "cuda": "CUDA",
    "git_version": "git version",
    "hip": "HIP",
    "debug": "debug build",
    "cudnn": "cuDNN",
    "nccl": "NCCL",
    "cublas": "cuBLAS",
    "triton": "triton",
}
# The ones read from the distributions that ship torch's GPU libraries.
STACK_FIELDS = ("cudnn", "nccl", "cublas", "triton")


def compare(b: Collector, e: Snapshot, a: Snapshot) -> None:
    et, at = e.torch, a.torch
    if et is None or at is None:
        return  # torch added or removed is reported under packages
    if "packages" in b.policy.ignore_sections and et.version != at.version:
        # --only torch: the version belongs to the build (packages would report it otherwise)
        b.add(
            "version",
            "version",
            expected=et.version,
            actual=at.version,
            severity=Severity.critical,
            message=f"torch {et.version} -> {at.version}",
        )
    for key, label in BUILD_FIELDS.items():
        ev, av = getattr(et, key), getattr(at, key)
        if ev != av:
            b.add(
                key,
                key,
                expected=ev,
                actual=av,
                severity=Severity.critical,
                message=f"torch's {label} {_said(key, ev)} -> {_said(key, av)}",
            )


def _said(key: str, value: object) -> str:
    """A build field in words: a CPU build's CUDA is "none", not Python's None."""
    if value is None:
        return "none" if key in ("cuda", "hip") else ABSENT
    return str(value)


def identity(snap: Snapshot) -> Iterator[tuple[str, str]]:
    if snap.torch is not None:
        for key in BUILD_FIELDS:
            yield f"torch {key}", _said(key, getattr(snap.torch, key))


SECTION = Section(name="torch", title="torch build", compare=compare, identity=identity)
