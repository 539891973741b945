"""The fit section: an extension that cannot load, weighed against the good snapshot, and in
a lock check where there is none."""

from __future__ import annotations

from envguard.compare.engine import diff
from envguard.compare.lockfiles.drift import lock_drift
from envguard.compare.models import Severity
from envguard.compare.policy import Policy
from envguard.compare.sections.fit import cannot_load, restore_hint
from envguard.snapshots.models import Fit, Snapshot, Unfit
from factories import snapshot

VISION = Unfit(
    path="torchvision/_C_stable.so",
    dist="torchvision 0.29.1",
    missing=("libcudart.so.13",),
    symbols=("aoti_torch_get_current_cuda_stream",),
    symbol_count=1,
    symbols_from="torch 2.13.0+cpu",
)


def found(good: Fit | None, live: Fit | None) -> list[tuple[str, str, str]]:
    drift = diff(snapshot(fit=good), snapshot(fit=live))
    return [(c.kind, c.severity.value, c.message) for c in drift.changes]


def test_the_message_names_the_library_and_the_symbol() -> None:
    assert cannot_load(VISION) == (
        "torchvision/_C_stable.so cannot load: needs libcudart.so.13 (not found) and 1 symbol"
        " torch 2.13.0+cpu does not export (aoti_torch_get_current_cuda_stream)"
    )
    many = VISION.model_copy(
        update={"missing": ("a.so", "b.so", "c.so"), "symbols": ("x", "y"), "symbol_count": 5}
    )
    assert "needs a.so, b.so and c.so (not found)" in cannot_load(many)
    assert "5 symbols torch 2.13.0+cpu does not export (x, y and 3 more)" in cannot_load(many)
    versions = Unfit(path="e.so", versions=("GLIBCXX_3.4.32 (libstdc++.so.6)",))
    assert cannot_load(versions) == (
        "e.so cannot load: needs version GLIBCXX_3.4.32 (libstdc++.so.6) (not defined)"
    )


def test_a_fit_lost_since_the_good_snapshot_is_critical() -> None:
    ((kind, severity, message),) = found(Fit(checked=3), Fit(checked=3, broken=(VISION,)))
    assert (kind, severity) == ("unfit", "critical")
    assert message == cannot_load(VISION)


def test_a_fit_the_good_snapshot_already_lacked_is_info() -> None:
    same = Fit(checked=3, broken=(VISION,))
    ((_, severity, message),) = found(same, same)
    assert severity == "info" and message.endswith("(as in the good snapshot)")
    # A different reason is news.
    worse = VISION.model_copy(update={"missing": ("libcudart.so.13", "libc10_cuda.so")})
    ((_, severity, _),) = found(same, Fit(checked=3, broken=(worse,)))
    assert severity == "critical"


def test_loading_again_is_info_and_an_unchecked_side_is_no_change() -> None:
    assert found(Fit(checked=3, broken=(VISION,)), Fit(checked=3)) == [
        ("fits", "info", "torchvision/_C_stable.so loads now (the good snapshot had it unable to)")
    ]
    assert found(Fit(checked=3), None) == []
    # A good snapshot from before the fit was recorded: what cannot load is still critical.
    assert found(None, Fit(checked=3, broken=(VISION,)))[0][1] == "critical"
    assert found(None, Fit(checked=3)) == []


def test_a_lock_check_names_what_cannot_load() -> None:
    snap = snapshot(fit=Fit(checked=1, broken=(VISION,)))
    drift = lock_drift(snap, {}, policy=Policy(), lock="uv.lock")
    (change,) = [c for c in drift.changes if c.section == "fit"]
    assert change.severity is Severity.critical
    assert cannot_load(VISION) in drift.verdict


def test_the_restore_hint_says_which_build() -> None:
    snap = snapshot(fit=Fit(checked=1, broken=(VISION,)))
    (change,) = diff(snapshot(fit=Fit()), snap).changes
    hint = restore_hint(change, snap)
    assert hint is not None and "install the torchvision build made for torch 2.13.0+cpu" in hint


def _node(driver: str | None, cuda: str | None) -> Snapshot:
    from envguard.snapshots.models import Accelerator, TorchBuild

    return snapshot(
        accelerator=Accelerator(present=driver is not None, driver=driver),
        torch=TorchBuild(version="2.14.1", cuda=cuda),
        fit=Fit(),
    )


def test_a_driver_older_than_the_cuda_build_is_named() -> None:
    from envguard.compare.sections.fit import driver_floor

    said = driver_floor(_node("550.54.15", "13.0"))
    assert said == (
        "torch 2.14.1 is built for CUDA 13.0, which needs an NVIDIA driver >= 580; this node's"
        ' is 550.54.15 ("driver version is insufficient")'
    )
    assert driver_floor(_node("580.82.07", "13.0")) is None
    assert driver_floor(_node("550.54.15", "12.8")) is None  # 12.x runs on >= 525
    assert driver_floor(_node("470.256.02", "12.8")) is not None
    assert driver_floor(_node(None, "13.0")) is None  # no driver seen: a CPU or build node
    assert driver_floor(_node("550.54.15", None)) is None  # a CPU torch


def test_the_driver_floor_is_critical_when_new_info_when_the_good_run_had_it() -> None:
    good, bad = _node("550.54.15", "12.8"), _node("550.54.15", "13.0")
    drift = diff(good, bad)
    assert [(c.kind, c.severity.value) for c in drift.changes if c.section == "fit"] == [
        ("driver", "critical")
    ]
    assert any("needs an NVIDIA driver >= 580" in line for line in drift.verdict)
    same = [(c.kind, c.severity.value) for c in diff(bad, bad).changes if c.section == "fit"]
    assert same == [("driver", "info")]


def _gpu(*caps: str, cubins: tuple[int, ...] = (75, 80, 86), ptx: tuple[int, ...] = ()) -> Snapshot:
    from envguard.snapshots.models import CompileKey, GpuArchs

    archs = GpuArchs(path="vision/_C.so", dist="vision 1.0", cubins=cubins, ptx=ptx)
    return snapshot(compile=CompileKey(capabilities=caps), fit=Fit(checked=1, archs=(archs,)))


def test_a_gpu_without_a_kernel_is_named_by_nvidias_rules() -> None:
    from envguard.compare.sections.fit import no_kernel

    assert no_kernel(_gpu("9.0")) == [
        (
            "vision/_C.so",
            "vision/_C.so has no kernel for sm_90 (built for sm_75, sm_80, sm_86; no PTX to JIT)",
        )
    ]
    # A cubin runs on its major at a minor at least its own: sm_86 on 8.9, not sm_86 on 8.0.
    assert no_kernel(_gpu("8.9", "7.5", "8.6")) == []
    assert no_kernel(_gpu("8.0", cubins=(86,)))[0][1].startswith("vision/_C.so has no kernel")
    # PTX for an arch at most the GPU's is JIT-compiled; newer PTX is not.
    assert no_kernel(_gpu("9.0", "12.0", ptx=(86,))) == []
    (said,) = no_kernel(_gpu("7.0", "8.0", ptx=(90,), cubins=()))
    assert said[1] == (
        "vision/_C.so has no kernel for sm_70 and sm_80 (no cubin; PTX only for compute_90,"
        " newer than the GPU)"
    )
    # No GPU recorded, or a capability that is not one: nothing judged.
    assert no_kernel(_gpu()) == [] and no_kernel(_gpu("n/a")) == []


def test_no_kernel_is_critical_when_new_info_when_the_good_run_had_it() -> None:
    def kinds(good: Snapshot, live: Snapshot) -> list[tuple[str, str]]:
        changes = diff(good, live).changes
        return [(c.kind, c.severity.value) for c in changes if c.section == "fit"]

    assert kinds(_gpu("8.6"), _gpu("9.0")) == [("arch", "critical")]
    assert kinds(_gpu("9.0"), _gpu("9.0")) == [("arch", "info")]
    assert kinds(_gpu("9.0"), _gpu("8.6")) == []
