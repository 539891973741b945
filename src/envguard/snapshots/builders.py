"""GENERATED from snapshots/models.py by `python -m envguard.dev regenerate`: do not edit.

built(): the Snapshot model of a document shape.fits() vouched for, without
validation (snapshots/document.py uses it).
"""

from __future__ import annotations

from envguard.snapshots import checks as _c

TYPE_CHECKING = False  # typing is not loaded for a command's start

if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

    from envguard.snapshots.models import Snapshot


def built(doc: Any, models: ModuleType) -> Snapshot:
    """The model of a document fits() vouched for, without validation: each field as
    the model's validation makes it (tuples, a datetime, nested models); ``models`` is
    snapshots.models, passed in: the models import shape.py, a sibling of this module."""
    snapshot: Snapshot = _built_Snapshot(doc, models)
    return snapshot


def _built_Snapshot(d: Any, m: Any) -> Any:
    v = {
        **d,
        "created": _c.created_value(d["created"]),
        "command": tuple(d["command"]),
        "metrics": dict(d["metrics"]),
        "interpreter": _built_Interpreter(d["interpreter"], m),
        "packages": tuple(_built_Package(x0, m) for x0 in d["packages"]),
        "torch": (None if d["torch"] is None else _built_TorchBuild(d["torch"], m)),
        "accelerator": _built_Accelerator(d["accelerator"], m),
        "repos": tuple(_built_Repo(x0, m) for x0 in d["repos"]),
        "files": tuple(_built_FileDigest(x0, m) for x0 in d["files"]),
        "caches": tuple(_built_Cache(x0, m) for x0 in d["caches"]),
        "env": _c.env_value(d["env"]),
        "warnings": tuple(d["warnings"]),
    }
    if "libraries" in d:
        v["libraries"] = tuple(_built_Library(x0, m) for x0 in d["libraries"])
    if "host_layer" in d:
        v["host_layer"] = None if d["host_layer"] is None else _built_HostLayer(d["host_layer"], m)
    if "env_at_start" in d:
        v["env_at_start"] = _c.start_value(d["env_at_start"])
    if "clashes" in d:
        v["clashes"] = (
            None if d["clashes"] is None else tuple(_built_Clash(x0, m) for x0 in d["clashes"])
        )
    if "unowned" in d:
        v["unowned"] = None if d["unowned"] is None else tuple(d["unowned"])
    if "fit" in d:
        v["fit"] = None if d["fit"] is None else _built_Fit(d["fit"], m)
    if "compile" in d:
        v["compile"] = None if d["compile"] is None else _built_CompileKey(d["compile"], m)
    return m.Snapshot.model_construct(**v)


def _built_Interpreter(d: Any, m: Any) -> Any:
    return m.Interpreter.model_construct(
        **{**d, "site_packages": tuple(d["site_packages"]), "markers": dict(d["markers"])}
    )


def _built_Package(d: Any, m: Any) -> Any:
    v = {**d, "source": _built_Source(d["source"], m), "requires": tuple(d["requires"])}
    if "on_disk" in d:
        v["on_disk"] = None if d["on_disk"] is None else _built_OnDisk(d["on_disk"], m)
    return m.Package.model_construct(**v)


def _built_Source(d: Any, m: Any) -> Any:
    return m.Source.model_construct(**d)


def _built_OnDisk(d: Any, m: Any) -> Any:
    return m.OnDisk.model_construct(
        **{
            **d,
            "modified": tuple(d["modified"]),
            "missing": tuple(d["missing"]),
            "added": tuple(d["added"]),
            "clobbered": tuple(d["clobbered"]),
        }
    )


def _built_TorchBuild(d: Any, m: Any) -> Any:
    return m.TorchBuild.model_construct(**d)


def _built_Library(d: Any, m: Any) -> Any:
    return m.Library.model_construct(**{**d, "also_claimed_by": tuple(d["also_claimed_by"])})


def _built_Accelerator(d: Any, m: Any) -> Any:
    return m.Accelerator.model_construct(**{**d, "gpus": tuple(d["gpus"])})


def _built_HostLayer(d: Any, m: Any) -> Any:
    return m.HostLayer.model_construct(
        **{
            **d,
            "gpu_devices": tuple(d["gpu_devices"]),
            "nccl_conf": tuple(_built_NcclConf(x0, m) for x0 in d["nccl_conf"]),
            "net_plugins": tuple(_built_NetPlugin(x0, m) for x0 in d["net_plugins"]),
            "infiniband": tuple(d["infiniband"]),
            "container": (None if d["container"] is None else _built_Container(d["container"], m)),
        }
    )


def _built_NcclConf(d: Any, m: Any) -> Any:
    return m.NcclConf.model_construct(**{**d, "keys": dict(d["keys"])})


def _built_NetPlugin(d: Any, m: Any) -> Any:
    return m.NetPlugin.model_construct(**d)


def _built_Container(d: Any, m: Any) -> Any:
    return m.Container.model_construct(**d)


def _built_Repo(d: Any, m: Any) -> Any:
    return m.Repo.model_construct(**d)


def _built_FileDigest(d: Any, m: Any) -> Any:
    return m.FileDigest.model_construct(**d)


def _built_Cache(d: Any, m: Any) -> Any:
    v = {**d, "archive": (None if d["archive"] is None else _built_CacheArchive(d["archive"], m))}
    if "builds" in d:
        v["builds"] = tuple(_built_CacheBuild(x0, m) for x0 in d["builds"])
    return m.Cache.model_construct(**v)


def _built_CacheArchive(d: Any, m: Any) -> Any:
    return m.CacheArchive.model_construct(**d)


def _built_CacheBuild(d: Any, m: Any) -> Any:
    return m.CacheBuild.model_construct(**d)


def _built_Clash(d: Any, m: Any) -> Any:
    return m.Clash.model_construct(
        **{**d, "claimants": tuple(_built_Claimant(x0, m) for x0 in d["claimants"])}
    )


def _built_Claimant(d: Any, m: Any) -> Any:
    return m.Claimant.model_construct(**d)


def _built_Fit(d: Any, m: Any) -> Any:
    v = {**d, "broken": tuple(_built_Unfit(x0, m) for x0 in d["broken"])}
    if "archs" in d:
        v["archs"] = tuple(_built_GpuArchs(x0, m) for x0 in d["archs"])
    return m.Fit.model_construct(**v)


def _built_Unfit(d: Any, m: Any) -> Any:
    return m.Unfit.model_construct(
        **{
            **d,
            "missing": tuple(d["missing"]),
            "versions": tuple(d["versions"]),
            "symbols": tuple(d["symbols"]),
        }
    )


def _built_GpuArchs(d: Any, m: Any) -> Any:
    return m.GpuArchs.model_construct(**{**d, "cubins": tuple(d["cubins"]), "ptx": tuple(d["ptx"])})


def _built_CompileKey(d: Any, m: Any) -> Any:
    return m.CompileKey.model_construct(
        **{
            **d,
            "cxx": (None if d["cxx"] is None else _built_Compiler(d["cxx"], m)),
            "triton": (None if d["triton"] is None else _built_TritonKey(d["triton"], m)),
            "capabilities": tuple(d["capabilities"]),
        }
    )


def _built_Compiler(d: Any, m: Any) -> Any:
    return m.Compiler.model_construct(**d)


def _built_TritonKey(d: Any, m: Any) -> Any:
    return m.TritonKey.model_construct(**d)
