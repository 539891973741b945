"""The libraries section: the version inside a GPU library against its metadata, the copy
torch loads, and what moved since the good snapshot."""

from __future__ import annotations

from typing import Any

from envguard.compare.engine import diff
from envguard.compare.models import Severity
from envguard.snapshots.models import Library
from factories import snapshot

NCCL = "nvidia/nccl/lib/libnccl.so.2"
SYSTEM = "/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5"


def nccl(**changes: Any) -> Library:
    fields: dict[str, Any] = {
        "name": "libnccl.so.2",
        "path": NCCL,
        "dist": "nvidia-nccl-cu13",
        "metadata_version": "2.30.7",
        "soname": "libnccl.so.2",
        "embedded_version": "2.30.7+cuda13.3",
        "version_source": "string",
        "loader_pick": NCCL,
        "loader_pick_why": "torch preload",
        "loader_pick_version": "2.30.7+cuda13.3",
    }
    fields.update(changes)
    return Library(**fields)


def found(good: tuple[Library, ...], live: tuple[Library, ...]) -> list[tuple[str, str, str]]:
    drift = diff(snapshot(libraries=good), snapshot(libraries=live))
    return [(c.kind, c.severity.value, c.message) for c in drift.changes]


def test_a_healthy_unchanged_library_is_no_drift() -> None:
    assert found((nccl(),), (nccl(),)) == []
    # A SONAME's major agrees with the metadata's version.
    cudart = nccl(
        name="libcudart.so.13",
        path="nvidia/cu13/lib/libcudart.so.13",
        dist="nvidia-cuda-runtime",
        metadata_version="13.0.96",
        embedded_version="13",
        version_source="soname",
        loader_pick="nvidia/cu13/lib/libcudart.so.13",
    )
    assert found((cudart,), (cudart,)) == []
    # CUDA 11's runtime SONAME is libcudart.so.11.0 whatever its 11.x: its major is what
    # it says (every PyPI cu11 torch venv was red on its own snapshot).
    cu11 = cudart.model_copy(
        update={
            "name": "libcudart.so.11.0",
            "path": "nvidia/cuda_runtime/lib/libcudart.so.11.0",
            "dist": "nvidia-cuda-runtime-cu11",
            "metadata_version": "11.8.89",
            "soname": "libcudart.so.11.0",
            "embedded_version": "11.0",
            "loader_pick": "nvidia/cuda_runtime/lib/libcudart.so.11.0",
        }
    )
    assert found((cu11,), (cu11,)) == []
    assert found((), (cu11.model_copy(update={"metadata_version": "12.8.90"}),)) != []


def test_a_copy_bundled_by_another_package_is_not_held_to_its_version() -> None:
    """triton 3.8.0 bundles CUPTI 13 and 12: its version says nothing of theirs (every
    PyPI CUDA torch venv was red on its own snapshot). A change of the copy's bytes is still
    named."""
    cupti = nccl(
        name="libcupti.so.13",
        path="triton/backends/nvidia/lib/cupti-blackwell/libcupti.so.13",
        dist="triton",
        metadata_version="3.8.0",
        soname="libcupti.so.13",
        embedded_version="13",
        version_source="soname",
        loader_pick=None,
    )
    assert found((cupti,), (cupti,)) == []
    assert found((), (cupti,)) == []
    moved = found((cupti,), (cupti.model_copy(update={"embedded_version": "12"}),))
    assert [(k, s) for k, s, _ in moved] == [("changed", "critical")]


def test_the_file_contradicting_its_metadata_is_critical() -> None:
    clobbered = nccl(
        embedded_version="2.28.9+cuda12.9",
        loader_pick_version="2.28.9+cuda12.9",
        also_claimed_by=("nvidia-nccl-cu12 2.28.9",),
    )
    changes = found((nccl(),), (clobbered,))
    assert changes == [
        (
            "changed",
            "critical",
            f"libnccl.so.2 ({NCCL}): the file says 2.30.7+cuda13.3 -> 2.28.9+cuda12.9",
        ),
        (
            "mismatch",
            "critical",
            "libnccl.so.2: nvidia-nccl-cu13 says 2.30.7, the file says 2.28.9+cuda12.9"
            " (also claimed by nvidia-nccl-cu12 2.28.9)",
        ),
    ]
    drift = diff(snapshot(libraries=(nccl(),)), snapshot(libraries=(clobbered,)))
    assert any("nvidia-nccl-cu13 says 2.30.7" in line for line in drift.verdict)


def test_a_library_torch_takes_from_elsewhere_is_named() -> None:
    shadowed = nccl(
        loader_pick=SYSTEM, loader_pick_why="LD_LIBRARY_PATH", loader_pick_version="2.21.5"
    )
    changes = found((nccl(),), (shadowed,))
    assert (
        "shadowed",
        "critical",
        f"torch will load {SYSTEM} (2.21.5, by LD_LIBRARY_PATH), not the wheel's {NCCL}",
    ) in changes
    assert ("pick", "critical", f"torch loads libnccl.so.2 from {NCCL} -> {SYSTEM}") in changes


def test_a_finding_the_good_snapshot_had_is_info() -> None:
    """The NCCL cu12 + cu13 pair clobber each other's libnccl.so.2 on every install: an
    untouched venv with it must match its own snapshot (exit 0)."""
    odd = nccl(embedded_version="2.28.9")
    (change,) = diff(snapshot(libraries=(odd,)), snapshot(libraries=(odd,))).changes
    assert change.severity is Severity.info
    assert change.message.endswith("(as in the good snapshot)")


def test_a_snapshot_from_before_libraries_compares_only_the_live_side() -> None:
    assert found((), (nccl(),)) == []
    assert [k for k, _, _ in found((), (nccl(embedded_version="2.28.9"),))] == ["mismatch"]


def test_an_unreadable_library_and_a_removed_one_are_reported() -> None:
    broken = nccl(embedded_version=None, error="not a readable ELF library (not an ELF file)")
    assert found((nccl(),), (broken,))[0] == (
        "changed",
        "critical",
        f"libnccl.so.2 ({NCCL}): the file says 2.30.7+cuda13.3 -> nothing readable"
        " (not a readable ELF library (not an ELF file))",
    )
    assert found((nccl(),), ()) == [
        ("removed", "warning", f"libnccl.so.2 ({NCCL}) is gone"),
    ]
