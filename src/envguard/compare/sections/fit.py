"""Will each compiled extension load: the libraries, versions and symbols it needs against
what the loader will give it (probe/target/fit.py), a fact of the files that needs no good
snapshot.

An extension that cannot load now and could in the good snapshot is critical; one the good
snapshot already had broken the same way is info (the good run ran so: an untouched venv
matches its own snapshot); one that loads again is info. The same for the driver floor: the
CUDA major torch is built for (and of the libcudart it loads) against the node's recorded
driver, which must be at least the major's minimum ("driver version is insufficient").
And the GPU archs: each loadable extension's fatbin against each GPU's recorded compute
capability ("no kernel image is available for execution on the device").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from envguard.compare.sections.base import Section
from envguard.compare.severity import Severity

if TYPE_CHECKING:
    from envguard.compare.engine import Collector
    from envguard.compare.models import Change
    from envguard.snapshots.models import GpuArchs, Snapshot, Unfit


def _listed(names: tuple[str, ...]) -> str:
    """ "a", "a and b", "a, b and c"."""
    if len(names) < 2:
        return "".join(names)
    return f"{', '.join(names[:-1])} and {names[-1]}"


def why(unfit: Unfit) -> str:
    """ "needs libcudart.so.13 (not found) and 1 symbol torch 2.13.0+cpu does not export
    (aoti_torch_get_current_cuda_stream)"."""
    parts = []
    if unfit.missing:
        parts.append(f"needs {_listed(unfit.missing)} (not found)")
    if unfit.versions:
        parts.append(f"needs version {_listed(unfit.versions)} (not defined)")
    if unfit.symbol_count:
        count = unfit.symbol_count
        noun = "symbol" if count == 1 else "symbols"
        whose = unfit.symbols_from or "its libraries"
        verb = "does" if unfit.symbols_from else "do"
        shown = ", ".join(unfit.symbols)
        more = f" and {count - len(unfit.symbols)} more" if count > len(unfit.symbols) else ""
        parts.append(f"{count} {noun} {whose} {verb} not export ({shown}{more})")
    return " and ".join(parts) or "nothing it lacks recorded"


def cannot_load(unfit: Unfit) -> str:
    """ "torchvision/_C_stable.so cannot load: needs ..."."""
    return f"{unfit.path} cannot load: {why(unfit)}"


# The oldest driver each CUDA major runs on (minor version compatibility, Linux): NVIDIA's
# "CUDA Compatibility" guide, table "CUDA Toolkit 11.x, 12.x, and 13.x Driver Version Ranges".
DRIVER_FLOORS = {11: "450.80.02", 12: "525", 13: "580"}


def driver_floor(snap: Snapshot) -> str | None:
    """ "torch 2.14.1 is built for CUDA 13.0, which needs an NVIDIA driver >= 580; this
    node's is 550.54.15", or None (the driver is recorded and new enough, or unknown)."""
    driver = snap.accelerator.driver
    if driver is None:
        return None  # no driver seen (a CPU node, a build machine): nothing to weigh
    needs: list[tuple[int, str]] = []
    if snap.torch is not None and snap.torch.cuda:
        needs.append(
            (
                _major(snap.torch.cuda),
                f"torch {snap.torch.version} is built for CUDA {snap.torch.cuda}",
            )
        )
    for lib in snap.libraries:
        soname = lib.soname or ""
        if soname.startswith("libcudart.so.") and lib.loader_pick is not None:
            needs.append(
                (_major(soname.rsplit(".so.", 1)[1]), f"torch loads {soname} ({lib.loader_pick})")
            )
    for major, why in sorted(needs, key=lambda n: -n[0]):
        floor = DRIVER_FLOORS.get(major)
        try:
            if floor is not None and Version(driver) < Version(floor):
                return (
                    f"{why}, which needs an NVIDIA driver >= {floor}; this node's is {driver}"
                    ' ("driver version is insufficient")'
                )
        except InvalidVersion:
            return None
    return None


def _major(version: str) -> int:
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() and len(head) < 4 else 0


def _sm(arch: int) -> tuple[int, int]:
    """86 -> (8, 6); 120 -> (12, 0): the fatbin's arch as (major, minor)."""
    return divmod(arch, 10)


def runs_on(archs: GpuArchs, capability: tuple[int, int]) -> bool:
    """Whether a kernel of ``archs`` runs on a GPU of ``capability`` (NVIDIA's CUDA C++
    Programming Guide, "Binary Compatibility" and "PTX Compatibility"): a cubin for X.y
    runs on X.z for z >= y only; PTX for an arch at most the GPU's is JIT-compiled."""
    major, minor = capability
    if any(_sm(c)[0] == major and _sm(c)[1] <= minor for c in archs.cubins):
        return True
    return any(_sm(p) <= capability for p in archs.ptx)


def _capability(text: str) -> tuple[int, int] | None:
    head, _, tail = text.partition(".")
    if head.isdigit() and tail.isdigit() and len(head) < 4 and len(tail) < 2:
        return (int(head), int(tail))
    return None


def _names(prefix: str, archs: tuple[int, ...]) -> str:
    return ", ".join(f"{prefix}_{a}" for a in archs)


def no_kernel(snap: Snapshot) -> list[tuple[str, str]]:
    """(path, "X.so has no kernel for sm_90 (built for sm_75, sm_80, sm_86; no PTX to
    JIT)") for each extension with no kernel for one of the recorded GPUs; [] where no
    compute capability or no fatbin is recorded."""
    if snap.fit is None or snap.compile is None:
        return []
    caps = sorted({c for c in map(_capability, snap.compile.capabilities) if c is not None})
    out = []
    for archs in snap.fit.archs:
        lacking = [cap for cap in caps if not runs_on(archs, cap)]
        if not lacking:
            continue
        sms = " and ".join(f"sm_{major}{minor}" for major, minor in lacking)
        built = f"built for {_names('sm', archs.cubins)}" if archs.cubins else "no cubin"
        if not archs.ptx:
            jit = "no PTX to JIT"
        else:
            jit = f"PTX only for {_names('compute', archs.ptx)}, newer than the GPU"
        out.append((archs.path, f"{archs.path} has no kernel for {sms} ({built}; {jit})"))
    return out


def facts(b: Collector, snap: Snapshot) -> None:
    """What cannot load in ``snap``, with no good snapshot to weigh it by (a lock check):
    each critical, a lock pins none of it."""
    compare(b, None, snap)


def compare(b: Collector, e: Snapshot | None, a: Snapshot) -> None:
    short = driver_floor(a)
    if short is not None:
        known = e is not None and driver_floor(e) == short
        b.finding(
            "driver",
            "driver",
            expected=e.accelerator.driver if e is not None else None,
            actual=a.accelerator.driver,
            message=short,
            known=known,
        )
    before_arch = dict(no_kernel(e)) if e is not None else {}
    for path, message in no_kernel(a):
        known = before_arch.get(path) == message
        b.finding(
            "arch",
            path,
            expected=before_arch.get(path),
            actual=message,
            message=message,
            known=known,
        )
    if a.fit is None:
        return  # the other side is a snapshot taken before the fit was recorded
    before = {u.path: u for u in e.fit.broken} if e is not None and e.fit is not None else {}
    after = {u.path: u for u in a.fit.broken}
    for path, unfit in sorted(after.items()):
        old = before.get(path)
        known = old is not None and why(old) == why(unfit)
        b.finding(
            "unfit",
            path,
            expected=None if old is None else why(old),
            actual=why(unfit),
            message=cannot_load(unfit),
            known=known,
        )
    if e is None or e.fit is None:
        return
    for path in sorted(before.keys() - after.keys()):
        b.add(
            "fits",
            path,
            expected=why(before[path]),
            severity=Severity.info,
            message=f"{path} loads now (the good snapshot had it unable to)",
        )


def identity(snap: Snapshot) -> Iterator[tuple[str, str]]:
    if snap.fit is not None:
        for unfit in snap.fit.broken:
            yield f"fit {unfit.path}", why(unfit)


def restore_hint(change: Change, snapshot: Snapshot) -> str | None:
    if change.kind != "unfit" or snapshot.fit is None:
        return None
    unfit = next((u for u in snapshot.fit.broken if u.path == change.name), None)
    if unfit is None or unfit.dist is None:
        return None
    name = unfit.dist.split(" ", 1)[0]
    made_for = f" made for {unfit.symbols_from}" if unfit.symbols_from else ""
    return (
        f"{change.message}; install the {name} build{made_for}, or the versions it was built with"
    )


SECTION = Section(
    name="fit",
    title="Extensions that cannot load",
    compare=compare,
    identity=identity,
    restore_hint=restore_hint,
)
