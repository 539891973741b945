"""Will torch.compile's caches hit? A forecast from two snapshots' key ingredients (pure).

What enters which key, as torch 2.13 and triton 3.8 compute them (docs/compile-cache.md
holds the agreement table measured against torch's own counters):

- an FX graph entry's key (torch/_inductor/codecache.py, FxGraphHashDetails) holds
  ``torch_key()`` (torch's version and every torch source file), inductor's config (every
  ``TORCHINDUCTOR_*`` variable it reads at import, and ``cpp.cxx``: the compiler's *name*),
  and ``get_system()``: the GPU's name and triton's key, only where a GPU is present;
- the C++ kernels it loads are keyed by their source and command line, and the ISA check by
  the compiler's ``--version``: a compiler upgraded under the same name still hits the
  graph cache, then rebuilds the kernels;
- triton's own cache (~/.triton/cache) keys every kernel by ``triton_key()`` and the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from envguard.snapshots.models import Cache, CacheBuild, Snapshot, TorchBuild

Verdict = Literal["miss", "rebuild", "may-miss"]
# What a forecast says of a verdict, in the change's kind.
KINDS: dict[Verdict, str] = {"miss": "will-miss", "rebuild": "rebuild", "may-miss": "may-miss"}
# TORCHINDUCTOR_* variables inductor leaves out of its keys (config's
# _cache_config_ignore_prefix, or read outside its config): where, and how many workers.
_NOT_IN_KEY = frozenset(
    {
        "TORCHINDUCTOR_CACHE_DIR",
        "TORCHINDUCTOR_COMPILE_THREADS",
        "TORCHINDUCTOR_WORKER_START",
        "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE",
        "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE",
        "TORCHINDUCTOR_AUTOGRAD_CACHE",
        "TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE",
        "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE",
    }
)
# Turned off, a cache misses whatever its key.
_OFF = {"TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1", "TORCHINDUCTOR_FX_GRAPH_CACHE": "0"}
_TRITON_NOT_IN_KEY = frozenset({"TRITON_CACHE_DIR", "TRITON_HOME", "TRITON_CACHE_MANAGER"})
NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "9p")


@dataclass(frozen=True)
class Reason:
    """One ingredient that changed, what it does to a cache of ``kind``, and why."""

    verdict: Verdict
    ingredient: str  # "triton", "torch", "compiler", "TORCHINDUCTOR_X", "python", "device"
    expected: str
    actual: str
    why: str  # "triton 3.7.0 -> 3.8.0 is in every kernel's key"


def _gpu(snap: Snapshot) -> bool:
    compile_key = snap.compile
    return bool(snap.accelerator.gpus) or bool(compile_key and compile_key.capabilities)


def _text(value: object) -> str:
    return "none" if value is None or value == "" else str(value)


def _torch(e: Snapshot, a: Snapshot) -> list[Reason]:
    et, at = e.torch, a.torch
    if et is None or at is None:
        return []
    for field in ("version", "git_version", "cuda", "hip", "debug"):
        ev, av = getattr(et, field), getattr(at, field)
        if ev != av:
            what = "torch" if field == "version" else f"torch's {field.replace('_', ' ')}"
            return [
                Reason(
                    "miss",
                    "torch",
                    _text(ev),
                    _text(av),
                    f"{what} {_text(ev)} -> {_text(av)} is in every graph's key"
                    " (torch_key hashes torch's version and sources)",
                )
            ]
    ep, ap = e.package_map().get("torch"), a.package_map().get("torch")
    if ep is not None and ap is not None and ap.on_disk is not None:
        before = set(ep.on_disk.modified if ep.on_disk else ())
        now = [p for p in ap.on_disk.modified if p not in before]
        if now:
            return [
                Reason(
                    "miss",
                    "torch",
                    "as installed",
                    f"{len(now)} files modified",
                    f"torch's installed files changed ({now[0]}"
                    f"{f' and {len(now) - 1} more' if len(now) > 1 else ''}): torch_key hashes"
                    " every torch source file",
                )
            ]
    return []


def _triton(e: Snapshot, a: Snapshot, *, for_graphs: bool) -> list[Reason]:
    ek = e.compile.triton if e.compile else None
    ak = a.compile.triton if a.compile else None
    if e.compile is None or a.compile is None:
        return []
    where = "every kernel's key" if not for_graphs else "every graph's key (with a GPU)"
    if (ek is None) != (ak is None) or (ek and ak and ek.version != ak.version):
        ev, av = (ek.version if ek else None), (ak.version if ak else None)
        return [
            Reason(
                "miss",
                "triton",
                _text(ev),
                _text(av),
                f"triton {_text(ev)} -> {_text(av)} is in {where}",
            )
        ]
    if ek and ak and ek.digest and ak.digest and ek.digest != ak.digest:
        return [
            Reason(
                "miss",
                "triton",
                ek.digest[:12],
                ak.digest[:12],
                f"triton {ak.version}'s sources changed (triton_key {ek.digest[:12]} ->"
                f" {ak.digest[:12]}): it is in {where}",
            )
        ]
    return []


def _compiler(e: Snapshot, a: Snapshot) -> list[Reason]:
    ec = e.compile.cxx if e.compile else None
    ac = a.compile.cxx if a.compile else None
    if ec is None or ac is None:
        return []
    if ec.name != ac.name:
        return [
            Reason(
                "miss",
                "compiler",
                ec.name,
                ac.name,
                f"the C++ compiler {ec.name} -> {ac.name} ($CXX) is in every graph's key"
                " (inductor's cpp.cxx)",
            )
        ]
    if ec.version and ac.version and ec.version != ac.version:
        return [
            Reason(
                "rebuild",
                "compiler",
                ec.version,
                ac.version,
                f"the C++ compiler {ac.name} changed ({ec.version} -> {ac.version}): its"
                " name is in the graph's key, not its version, so graphs hit and their C++"
                " kernels are rebuilt",
            )
        ]
    return []


def _variables(e: Snapshot, a: Snapshot, *, prefix: str) -> list[Reason]:
    from envguard.compare.sections.env import own_change  # (sections import this module)

    out = []
    for name in sorted(set(e.env) | set(a.env)):
        if not name.startswith(prefix):
            continue
        ev, av = e.env.get(name), a.env.get(name)
        if ev == av or own_change(e, a, name):  # (set again by a relaunch: the env section)
            continue
        shown = f"{name} {_text(ev)} -> {_text(av)}"
        if prefix == "TRITON_":
            if name not in _TRITON_NOT_IN_KEY:
                out.append(
                    Reason(
                        "may-miss",
                        name,
                        _text(ev),
                        _text(av),
                        f"{shown}: triton keys its kernels by the variables it marks as"
                        " changing code",
                    )
                )
        elif name in _OFF and av == _OFF[name]:
            out.append(Reason("miss", name, _text(ev), _text(av), f"{shown} turns the cache off"))
        elif name not in _NOT_IN_KEY and name not in _OFF:
            out.append(
                Reason(
                    "miss",
                    name,
                    _text(ev),
                    _text(av),
                    f"{shown}: inductor reads it into its config, which is in every graph's key",
                )
            )
    return out


def _python(e: Snapshot, a: Snapshot) -> list[Reason]:
    ev, av = e.interpreter.version, a.interpreter.version
    if ev.split(".")[:2] == av.split(".")[:2]:
        return []
    return [
        Reason(
            "may-miss",
            "python",
            ev,
            av,
            f"Python {ev} -> {av}: its torch is another wheel, and the C++ kernels build"
            " against its headers",
        )
    ]


def _device(e: Snapshot, a: Snapshot) -> list[Reason]:
    eg, ag = e.accelerator.gpus, a.accelerator.gpus
    if eg and ag and sorted(set(eg)) != sorted(set(ag)):
        ev, av = ", ".join(sorted(set(eg))), ", ".join(sorted(set(ag)))
        return [Reason("miss", "device", ev, av, f"the GPU {ev} -> {av} is in every kernel's key")]
    ec = e.compile.capabilities if e.compile else ()
    ac = a.compile.capabilities if a.compile else ()
    if ec and ac and sorted(set(ec)) != sorted(set(ac)):
        ev, av = ", ".join(sorted(set(ec))), ", ".join(sorted(set(ac)))
        return [
            Reason(
                "miss",
                "device",
                ev,
                av,
                f"compute capability {ev} -> {av} is in every kernel's key",
            )
        ]
    return []


def forecast(kind: str, e: Snapshot, a: Snapshot) -> list[Reason]:
    """Why a cache of ``kind`` ("inductor", "triton") warm in ``e`` misses in ``a``: each
    ingredient of its key that changed, the surest first."""
    if kind == "triton":
        reasons = _triton(e, a, for_graphs=False) + _device(e, a)
        reasons += _variables(e, a, prefix="TRITON_")
    else:
        reasons = _torch(e, a) + _compiler(e, a) + _variables(e, a, prefix="TORCHINDUCTOR_")
        if _gpu(e) or _gpu(a):  # get_system() holds triton's key only with a GPU
            reasons += _triton(e, a, for_graphs=True) + _device(e, a)
        reasons += _python(e, a)
    order = {"miss": 0, "rebuild": 1, "may-miss": 2}
    return sorted(reasons, key=lambda r: order[r.verdict])


def stale(cache: Cache, snap: Snapshot) -> str | None:
    """Why ``cache``'s FX graph entries (as far as they were read) will not be used by
    ``snap``'s torch: every one was built by another torch, compiler or triton."""
    builds = [b for b in cache.builds if b.entries]
    torch = snap.torch
    if not builds or torch is None:
        return None
    known = [b for b in builds if b.torch is not None]
    if known and not any(_same_torch(b, torch) for b in known):
        shown = sorted({b.torch or "?" for b in known})
        return f"built by torch {', '.join(shown)} for another torch ({torch.version})"
    cxx = snap.compile.cxx.name if snap.compile and snap.compile.cxx else None
    named = [b for b in builds if b.cxx is not None]
    if cxx and named and all(b.cxx != cxx for b in named):
        shown = sorted({b.cxx or "?" for b in named})
        return f"built with the C++ compiler {', '.join(shown)}; inductor now calls {cxx}"
    digest = snap.compile.triton.digest if snap.compile and snap.compile.triton else None
    pinned = [b for b in builds if b.triton is not None]
    if digest and pinned and all(b.triton != digest for b in pinned):
        return "built with another triton (its key is in every entry's)"
    return None


def _same_torch(build: CacheBuild, torch: TorchBuild) -> bool:
    if build.torch != torch.version:
        return False
    return build.git_version is None or torch.git_version in (None, build.git_version)


def networked(kind: str | None) -> bool:
    """Whether a file system type is one shared between nodes (nfs, lustre, fuse.*...)."""
    return bool(kind) and (kind in NETWORK_FS or str(kind).startswith("fuse."))
