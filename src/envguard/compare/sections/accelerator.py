"""The GPUs and their driver, and the CUDA compiler on PATH.

The driver, the GPU count and models are critical: the nodes of a job must agree on them
(NCCL's protocols and a compiled kernel's fit depend on them), and so must a relaunch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from envguard.compare.sections.base import Section
from envguard.compare.sections.interpreter import ABSENT
from envguard.compare.severity import Severity

if TYPE_CHECKING:
    from envguard.compare.engine import Collector
    from envguard.snapshots.models import Snapshot

C, W, I = Severity.critical, Severity.warning, Severity.info  # noqa: E741


def compare(b: Collector, e: Snapshot, a: Snapshot) -> None:
    ea, aa = e.accelerator, a.accelerator
    if ea.present and not aa.present:
        b.add(
            "missing",
            "gpu",
            expected=ea.count,
            actual=0,
            severity=C,
            message="no GPU or NVIDIA driver found (the good run had one)",
        )
        return
    if ea.driver != aa.driver and ea.driver and aa.driver:
        b.add(
            "driver",
            "driver",
            expected=ea.driver,
            actual=aa.driver,
            severity=C,
            message=f"NVIDIA driver {ea.driver} -> {aa.driver}",
        )
    if ea.count != aa.count:
        b.add(
            "count",
            "gpus",
            expected=ea.count,
            actual=aa.count,
            severity=C,
            message=f"GPU count {ea.count} -> {aa.count}",
        )
    if sorted(set(ea.gpus)) != sorted(set(aa.gpus)) and ea.gpus and aa.gpus:
        b.add(
            "model",
            "gpu",
            expected=", ".join(sorted(set(ea.gpus))),
            actual=", ".join(sorted(set(aa.gpus))),
            severity=C,
            message="GPU model changed",
        )
    if ea.nvcc != aa.nvcc:
        b.add(
            "nvcc",
            "nvcc",
            expected=ea.nvcc,
            actual=aa.nvcc,
            severity=I,
            message=f"nvcc {ea.nvcc} -> {aa.nvcc}",
        )


def identity(snap: Snapshot) -> Iterator[tuple[str, str]]:
    a = snap.accelerator
    yield "driver", a.driver or ABSENT
    yield "gpus", f"{a.count} x {', '.join(sorted(set(a.gpus)))}" if a.gpus else "0"


SECTION = Section(name="accelerator", title="GPUs and driver", compare=compare, identity=identity)
