"""GENERATED from snapshots/models.py by `python -m envguard.dev regenerate`: do not edit.

A snapshot document's shape for the paths that must not load pydantic: the key
sets, the schema's minor version, fits() (snapshots/document.py uses it; built() is
in builders.py), and what a reader of an older minor version reads past
(snapshots/store.py).
"""

from __future__ import annotations

import re

from envguard.snapshots import checks as _c

TYPE_CHECKING = False  # typing is not loaded for a command's start
if TYPE_CHECKING:
    from typing import Any

# The largest Since(minor) of any field: what a file written now is.
SCHEMA_MINOR = 8

_KEYS_Snapshot = frozenset(
    [
        "schema_version",
        "schema_minor",
        "name",
        "created",
        "host",
        "user",
        "envguard_version",
        "command",
        "via",
        "note",
        "metrics",
        "interpreter",
        "packages",
        "torch",
        "libraries",
        "accelerator",
        "host_layer",
        "repos",
        "files",
        "caches",
        "env",
        "env_at_start",
        "warnings",
        "clashes",
        "unowned",
        "fit",
        "compile",
        "signature",
    ]
)
_REQUIRED_Snapshot = _KEYS_Snapshot - frozenset(
    [
        "schema_minor",
        "libraries",
        "host_layer",
        "env_at_start",
        "clashes",
        "unowned",
        "fit",
        "compile",
        "signature",
    ]
)
_KEYS_Interpreter = frozenset(
    [
        "version",
        "implementation",
        "executable",
        "prefix",
        "base_prefix",
        "is_venv",
        "os",
        "machine",
        "libc",
        "site_packages",
        "markers",
    ]
)
_KEYS_Package = frozenset(
    [
        "name",
        "display_name",
        "version",
        "installer",
        "requested",
        "location",
        "source",
        "fingerprint",
        "shadowed",
        "requires",
        "on_disk",
    ]
)
_REQUIRED_Package = _KEYS_Package - frozenset(["on_disk"])
_KEYS_Source = frozenset(
    ["kind", "url", "vcs", "commit", "requested_revision", "path", "archive_hash", "subdirectory"]
)
_KEYS_OnDisk = frozenset(["checked", "modified", "missing", "added", "clobbered", "more"])
_KEYS_TorchBuild = frozenset(
    ["version", "cuda", "git_version", "hip", "debug", "cudnn", "nccl", "cublas", "triton"]
)
_KEYS_Library = frozenset(
    [
        "name",
        "path",
        "dist",
        "metadata_version",
        "also_claimed_by",
        "soname",
        "embedded_version",
        "version_source",
        "loader_pick",
        "loader_pick_why",
        "loader_pick_version",
        "mapped",
        "error",
    ]
)
_KEYS_Accelerator = frozenset(["present", "driver", "gpus", "count", "nvcc", "source"])
_KEYS_HostLayer = frozenset(
    [
        "gpu_devices",
        "nccl_conf",
        "net_plugins",
        "net_plugin",
        "peermem",
        "infiniband",
        "ofed",
        "container",
    ]
)
_KEYS_NcclConf = frozenset(["path", "sha256", "keys", "error"])
_KEYS_NetPlugin = frozenset(["name", "path", "sha256"])
_KEYS_Container = frozenset(["runtime", "image", "digest", "id"])
_KEYS_Repo = frozenset(
    ["path", "head", "branch", "dirty", "diff_sha256", "untracked", "remote", "error"]
)
_REQUIRED_Repo = _KEYS_Repo - frozenset(["error"])
_KEYS_FileDigest = frozenset(
    ["path", "sha256", "size", "root", "rel", "read_from", "error", "mode"]
)
_REQUIRED_FileDigest = _KEYS_FileDigest - frozenset(["read_from", "error", "mode"])
_KEYS_Cache = frozenset(
    [
        "kind",
        "path",
        "exists",
        "readable",
        "bytes",
        "files",
        "newest_mtime",
        "archive",
        "fs",
        "builds",
        "error",
    ]
)
_REQUIRED_Cache = _KEYS_Cache - frozenset(["fs", "builds", "error"])
_KEYS_CacheArchive = frozenset(["sha256", "files", "bytes", "compressed"])
_KEYS_CacheBuild = frozenset(
    ["torch", "git_version", "torch_key", "system", "cxx", "device", "triton", "entries"]
)
_KEYS_Clash = frozenset(["path", "claimants", "owner"])
_KEYS_Claimant = frozenset(["name", "version"])
_KEYS_Fit = frozenset(["checked", "broken", "archs"])
_REQUIRED_Fit = _KEYS_Fit - frozenset(["archs"])
_KEYS_Unfit = frozenset(
    ["path", "dist", "missing", "versions", "symbols", "symbol_count", "symbols_from"]
)
_KEYS_GpuArchs = frozenset(["path", "dist", "cubins", "ptx"])
_KEYS_CompileKey = frozenset(["cxx", "triton", "capabilities"])
_KEYS_Compiler = frozenset(["name", "path", "version", "error"])
_KEYS_TritonKey = frozenset(["version", "digest", "files", "error"])

# Every model's fields: what a reader knows (store.py reads past the rest of a newer
# minor version's file).
FIELDS: dict[str, frozenset[str]] = {
    "Snapshot": _KEYS_Snapshot,
    "Interpreter": _KEYS_Interpreter,
    "Package": _KEYS_Package,
    "Source": _KEYS_Source,
    "OnDisk": _KEYS_OnDisk,
    "TorchBuild": _KEYS_TorchBuild,
    "Library": _KEYS_Library,
    "Accelerator": _KEYS_Accelerator,
    "HostLayer": _KEYS_HostLayer,
    "NcclConf": _KEYS_NcclConf,
    "NetPlugin": _KEYS_NetPlugin,
    "Container": _KEYS_Container,
    "Repo": _KEYS_Repo,
    "FileDigest": _KEYS_FileDigest,
    "Cache": _KEYS_Cache,
    "CacheArchive": _KEYS_CacheArchive,
    "CacheBuild": _KEYS_CacheBuild,
    "Clash": _KEYS_Clash,
    "Claimant": _KEYS_Claimant,
    "Fit": _KEYS_Fit,
    "Unfit": _KEYS_Unfit,
    "GpuArchs": _KEYS_GpuArchs,
    "CompileKey": _KEYS_CompileKey,
    "Compiler": _KEYS_Compiler,
    "TritonKey": _KEYS_TritonKey,
}
# Where a model nests another: model -> field -> the nested model.
NESTED: dict[str, dict[str, str]] = {
    "Snapshot": {
        "interpreter": "Interpreter",
        "packages": "Package",
        "torch": "TorchBuild",
        "libraries": "Library",
        "accelerator": "Accelerator",
        "host_layer": "HostLayer",
        "repos": "Repo",
        "files": "FileDigest",
        "caches": "Cache",
        "clashes": "Clash",
        "fit": "Fit",
        "compile": "CompileKey",
    },
    "Package": {"source": "Source", "on_disk": "OnDisk"},
    "HostLayer": {"nccl_conf": "NcclConf", "net_plugins": "NetPlugin", "container": "Container"},
    "Cache": {"archive": "CacheArchive", "builds": "CacheBuild"},
    "Clash": {"claimants": "Claimant"},
    "Fit": {"broken": "Unfit", "archs": "GpuArchs"},
    "CompileKey": {"cxx": "Compiler", "triton": "TritonKey"},
}
SNAPSHOT_KEYS = _KEYS_Snapshot
# What only a live side carries (Field(exclude=True)), by the snapshot's field.
LIVE_ONLY: dict[str, frozenset[str]] = {
    "repos": frozenset(["error"]),
    "files": frozenset(["error", "read_from"]),
    "caches": frozenset(["error"]),
}

_PATTERN_0 = re.compile("^[0-9a-f]{64}$")


def fits(doc: Any) -> bool:
    """True when ``Snapshot.model_validate(doc)`` takes ``doc`` as it is (and writes it
    back unchanged, when it holds every key); False when unsure: the model decides."""
    return _fits_Snapshot(doc)


def _fits_Snapshot(d: Any) -> bool:
    return (
        type(d) is dict
        and _REQUIRED_Snapshot <= d.keys() <= _KEYS_Snapshot
        and (type(d["schema_version"]) is int and d["schema_version"] >= 1)
        and ("schema_minor" not in d or (type(d["schema_minor"]) is int and d["schema_minor"] >= 0))
        and (_c.line(d["name"]))
        and (_c.created(d["created"]))
        and (_c.line(d["host"]))
        and (_c.line(d["user"]))
        and (type(d["envguard_version"]) is str)
        and (_c.strs(d["command"]))
        and (d["via"] is None or type(d["via"]) is str)
        and (d["note"] is None or type(d["note"]) is str)
        and (
            type(d["metrics"]) is dict
            and all(type(k0) is str and _c.number(x0) for k0, x0 in d["metrics"].items())
        )
        and (_fits_Interpreter(d["interpreter"]))
        and (type(d["packages"]) is list and all(_fits_Package(x0) for x0 in d["packages"]))
        and (d["torch"] is None or _fits_TorchBuild(d["torch"]))
        and (
            "libraries" not in d
            or (type(d["libraries"]) is list and all(_fits_Library(x0) for x0 in d["libraries"]))
        )
        and (_fits_Accelerator(d["accelerator"]))
        and ("host_layer" not in d or (d["host_layer"] is None or _fits_HostLayer(d["host_layer"])))
        and (type(d["repos"]) is list and all(_fits_Repo(x0) for x0 in d["repos"]))
        and (type(d["files"]) is list and all(_fits_FileDigest(x0) for x0 in d["files"]))
        and (type(d["caches"]) is list and all(_fits_Cache(x0) for x0 in d["caches"]))
        and (_c.env_redacted(d["env"]))
        and ("env_at_start" not in d or _c.start_redacted(d["env_at_start"]))
        and (_c.strs(d["warnings"]))
        and (
            "clashes" not in d
            or (
                d["clashes"] is None
                or (
                    type(d["clashes"]) is list
                    and len(d["clashes"]) <= 1000
                    and all(_fits_Clash(x0) for x0 in d["clashes"])
                )
            )
        )
        and (
            "unowned" not in d
            or (
                d["unowned"] is None
                or (
                    type(d["unowned"]) is list
                    and len(d["unowned"]) <= 200
                    and all(_c.line(x0) for x0 in d["unowned"])
                )
            )
        )
        and ("fit" not in d or (d["fit"] is None or _fits_Fit(d["fit"])))
        and ("compile" not in d or (d["compile"] is None or _fits_CompileKey(d["compile"])))
        and (
            "signature" not in d
            or (d["signature"] is None or (_c.line(d["signature"]) and len(d["signature"]) <= 256))
        )
        and _c.one_entry_per_package(d)
    )


def _fits_Interpreter(d: Any) -> bool:
    return (
        type(d) is dict
        and d.keys() == _KEYS_Interpreter
        and (type(d["version"]) is str)
        and (type(d["implementation"]) is str)
        and (type(d["executable"]) is str)
        and (type(d["prefix"]) is str)
        and (type(d["base_prefix"]) is str)
        and (type(d["is_venv"]) is bool)
        and (type(d["os"]) is str)
        and (type(d["machine"]) is str)
        and (d["libc"] is None or type(d["libc"]) is str)
        and (_c.strs(d["site_packages"]))
        and (
            type(d["markers"]) is dict
            and all(type(k0) is str and type(x0) is str for k0, x0 in d["markers"].items())
        )
    )


def _fits_Package(d: Any) -> bool:
    return (
        type(d) is dict
        and _REQUIRED_Package <= d.keys() <= _KEYS_Package
        and (type(d["name"]) is str)
        and (type(d["display_name"]) is str)
        and (_c.bounded(d["version"], 256))
        and (d["installer"] is None or type(d["installer"]) is str)
        and (type(d["requested"]) is bool)
        and (type(d["location"]) is str)
        and (_fits_Source(d["source"]))
        and (d["fingerprint"] is None or type(d["fingerprint"]) is str)
        and (type(d["shadowed"]) is bool)
        and (
            type(d["requires"]) is list
            and len(d["requires"]) <= 2000
            and all((_c.line(x0) and len(x0) <= 512) for x0 in d["requires"])
        )
        and ("on_disk" not in d or (d["on_disk"] is None or _fits_OnDisk(d["on_disk"])))
    )


def _fits_Source(d: Any) -> bool:
    return (
        type(d) is dict
        and d.keys() == _KEYS_Source
        and (type(d["kind"]) is str and d["kind"] in ("index", "url", "vcs", "dir", "editable"))
        and (d["url"] is None or type(d["url"]) is str)
        and (d["vcs"] is None or type(d["vcs"]) is str)
        and (d["commit"] is None or type(d["commit"]) is str)
        and (d["requested_revision"] is None or type(d["requested_revision"]) is str)
        and (d["path"] is None or type(d["path"]) is str)
        and (d["archive_hash"] is None or type(d["archive_hash"]) is str)
        and (d["subdirectory"] is None or type(d["subdirectory"]) is str)
    )


def _fits_OnDisk(d: Any) -> bool:
    return (
        type(d) is dict
        and d.keys() == _KEYS_OnDisk
        and (type(d["checked"]) is int)
        and (
            type(d["modified"]) is list
            and len(d["modified"]) <= 50
            and all(_c.line(x0) for x0 in d["modified"])
        )
        and (
            type(d["missing"]) is list
            and len(d["missing"]) <= 50
            and all(_c.line(x0) for x0 in d["missing"])
        )
        and (
            type(d["added"]) is list
            and len(d["added"]) <= 50
            and all(_c.line(x0) for x0 in d["added"])
        )
        and (
            type(d["clobbered"]) is list
            and len(d["clobbered"]) <= 50
            and all(_c.line(x0) for x0 in d["clobbered"])
        )
        and (type(d["more"]) is int)
    )


def _fits_TorchBuild(d: Any) -> bool:
    return (
        type(d) is dict
        and d.keys() == _KEYS_TorchBuild
        and (_c.bounded(d["version"], 256))
        and (d["cuda"] is None or type(d["cuda"]) is str)
        and (d["git_version"] is None or type(d["git_version"]) is str)
        and (d["hip"] is None or type(d["hip"]) is str)
        and (d["debug"] is None or type(d["debug"]) is bool)
        and (d["cudnn"] is None or type(d["cudnn"]) is str)
        and (d["nccl"] is None or type(d["nccl"]) is str)
        and (d["cublas"] is None or type(d["cublas"]) is str)
        and (d["triton"] is None or type(d["triton"]) is str)
    )


def _fits_Library(d: Any) -> bool:
    return (
        type(d) is dict
        and d.keys() == _KEYS_Library
        and (_c.line(d["name"]))
        and (_c.line(d["path"]))
        and (d["dist"] is None or _c.line(d["dist"]))
        and (d["metadata_version"] is None or _c.line(d["metadata_version"]))
        and (type(d["also_claimed_by"]) is list and all(_c.line(x0) for x0 in d["also_claimed_by"]))
        and (d["soname"] is None or _c.line(d["soname"]))
        and (d["embedded_version"] is None or _c.line(d["embedded_version"]))
        and (d["version_source"] is None or _c.line(d["version_source"]))
        and (d["loader_pick"] is None or _c.line(d["loader_pick"]))
        and (d["loader_pick_why"] is None or _c.line(d["loader_pick_why"]))
        and (d["loader_pick_version"] is None or _c.line(d["loader_pick_version"]))
        and (d["mapped"] is None or _c.line(d["mapped"]))
        and (d["error"] is None or _c.line(d["error"]))
    )


def _fits_Accelerator(d: Any) -> bool:
    return (
        type(d) is dict
        and d.keys() == _KEYS_Accelerator
        and (type(d["present"]) is bool)
        and (d["driver"] is None or type(d["driver"]) is str)
        and (_c.strs(d["gpus"]))
        and (type(d["count"]) is int)
        and (d["nvcc"] is None or type(d["nvcc"]) is str)
        and (d["source"] is None or type(d["source"]) is str)
    )


def _fits_HostLayer(d: Any) -> bool:
    return (
        type(d) is dict
        and d.keys() == _KEYS_HostLayer
        and (
            type(d["gpu_devices"]) is list
            and len(d["gpu_devices"]) <= 64
            and all(_c.line(x0) for x0 in d["gpu_devices"])
        )
        and (
            type(d["nccl_conf"]) is list
            and len(d["nccl_conf"]) <= 2
            and all(_fits_NcclConf(x0) for x0 in d["nccl_conf"])
        )
        and (
            type(d["net_plugins"]) is list
            and len(d["net_plugins"]) <= 64
            and all(_fits_NetPlugin(x0) for x0 in d["net_plugins"])
        )
        and (d["net_plugin"] is None or _c.line(d["net_plugin"]))
        and (d["peermem"] is None or type(d["peermem"]) is bool)
        and (
            type(d["infiniband"]) is list
            and len(d["infiniband"]) <= 64
            and all(_c.line(x0) for x0 in d["infiniband"])
        )
        and (d["ofed"] is None or _c.line(d["ofed"]))
        and (d["container"] is None or _fits_Container(d["container"]))
    )


def _fits_NcclConf(d: Any) -> bool:
    return (
        type(d) is dict
        and d.keys() == _KEYS_NcclConf
        and (_c.line(d["path"]))
        and (d["sha256"] is None or _c.matches(d["sha256"], _PATTERN_0))
        and (
            type(d["keys"]) is dict
            and all(type(k0) is str and _c.line(x0) for k0, x0 in d["keys"].items())
        )
        and (d["error"] is None or _c.line(d["error"]))
    )


def _fits_NetPlugin(d: Any) -> bool:
    return (
        type(d) is dict
        and d.keys() == _KEYS_NetPlugin
        and (_c.line(d["name"]))
        and (_c.line(d["path"]))
        and (d["sha256"] is None or _c.matches(d["sha256"], _PATTERN_0))
    )


def _fits_Container(d: Any) -> bool:
    return (
        type(d) is dict
        and d.keys() == _KEYS_Container
        and (_c.line(d["runtime"]))
        and (d["image"] is None or _c.line(d["image"]))
        and (d["digest"] is None or _c.line(d["digest"]))
        and (d["id"] is None or _c.line(d["id"]))
    )


def _fits_Repo(d: Any) -> bool:
    return (
        type(d) is dict
        and _REQUIRED_Repo <= d.keys() <= _KEYS_Repo
        and (type(d["path"]) is str)
        and (d["head"] is None or type(d["head"]) is str)
        and (d["branch"] is None or type(d["branch"]) is str)
        and (type(d["dirty"]) is bool)
        and (d["diff_sha256"] is None or type(d["diff_sha256"]) is str)
        and (type(d["untracked"]) is int)
        and (d["remote"] is None or type(d["remote"]) is str)
        and ("error" not in d or (d["error"] is None or _c.line(d["error"])))
    )


def _fits_FileDigest(d: Any) -> bool:
    return (
        type(d) is dict
        and _REQUIRED_FileDigest <= d.keys() <= _KEYS_FileDigest
        and (type(d["path"]) is str)
        and (d["sha256"] is None or _c.matches(d["sha256"], _PATTERN_0))
        and (d["size"] is None or type(d["size"]) is int)
        and (d["root"] is None or type(d["root"]) is str)
        and (d["rel"] is None or type(d["rel"]) is str)
        and ("read_from" not in d or (d["read_from"] is None or type(d["read_from"]) is str))
        and ("error" not in d or (d["error"] is None or _c.line(d["error"])))
        and (
            "mode" not in d
            or (d["mode"] is None or (type(d["mode"]) is int and 0 <= d["mode"] <= 4095))
        )
    )


def _fits_Cache(d: Any) -> bool:
    return (
        type(d) is dict
        and _REQUIRED_Cache <= d.keys() <= _KEYS_Cache
        and (type(d["kind"]) is str)
        and (type(d["path"]) is str)
        and (type(d["exists"]) is bool)
        and (type(d["readable"]) is bool)
        and (type(d["bytes"]) is int)
        and (type(d["files"]) is int)
        and (d["newest_mtime"] is None or _c.finite_float(d["newest_mtime"]))
        and (d["archive"] is None or _fits_CacheArchive(d["archive"]))
        and ("fs" not in d or (d["fs"] is None or _c.line(d["fs"])))
        and (
            "builds" not in d
            or (
                type(d["builds"]) is list
                and len(d["builds"]) <= 20
                and all(_fits_CacheBuild(x0) for x0 in d["builds"])
            )
        )
        and ("error" not in d or (d["error"] is None or _c.line(d["error"])))
    )


def _fits_CacheArchive(d: Any) -> bool:
    return (
        type(d) is dict
        and d.keys() == _KEYS_CacheArchive
        and (_c.matches(d["sha256"], _PATTERN_0))
        and (type(d["files"]) is int)
        and (type(d["bytes"]) is int)
        and (type(d["compressed"]) is int)
    )


def _fits_CacheBuild(d: Any) -> bool:
    return (
        type(d) is dict
        and d.keys() == _KEYS_CacheBuild
        and (d["torch"] is None or _c.bounded(d["torch"], 256))
        and (d["git_version"] is None or _c.line(d["git_version"]))
        and (d["torch_key"] is None or _c.line(d["torch_key"]))
        and (d["system"] is None or _c.line(d["system"]))
        and (d["cxx"] is None or _c.line(d["cxx"]))
        and (d["device"] is None or _c.line(d["device"]))
        and (d["triton"] is None or _c.line(d["triton"]))
        and (type(d["entries"]) is int)
    )


def _fits_Clash(d: Any) -> bool:
    return (
        type(d) is dict
        and d.keys() == _KEYS_Clash
        and (_c.line(d["path"]))
        and (
            type(d["claimants"]) is list
            and len(d["claimants"]) <= 64
            and all(_fits_Claimant(x0) for x0 in d["claimants"])
        )
        and (d["owner"] is None or _c.line(d["owner"]))
    )


def _fits_Claimant(d: Any) -> bool:
    return (
        type(d) is dict
        and d.keys() == _KEYS_Claimant
        and (_c.line(d["name"]))
        and (_c.bounded(d["version"], 256))
    )


def _fits_Fit(d: Any) -> bool:
    return (
        type(d) is dict
        and _REQUIRED_Fit <= d.keys() <= _KEYS_Fit
        and (type(d["checked"]) is int)
        and (
            type(d["broken"]) is list
            and len(d["broken"]) <= 2048
            and all(_fits_Unfit(x0) for x0 in d["broken"])
        )
        and (
            "archs" not in d
            or (
                type(d["archs"]) is list
                and len(d["archs"]) <= 2048
                and all(_fits_GpuArchs(x0) for x0 in d["archs"])
            )
        )
    )


def _fits_Unfit(d: Any) -> bool:
    return (
        type(d) is dict
        and d.keys() == _KEYS_Unfit
        and (_c.line(d["path"]))
        and (d["dist"] is None or _c.line(d["dist"]))
        and (
            type(d["missing"]) is list
            and len(d["missing"]) <= 64
            and all(_c.line(x0) for x0 in d["missing"])
        )
        and (
            type(d["versions"]) is list
            and len(d["versions"]) <= 64
            and all(_c.line(x0) for x0 in d["versions"])
        )
        and (
            type(d["symbols"]) is list
            and len(d["symbols"]) <= 20
            and all(_c.line(x0) for x0 in d["symbols"])
        )
        and (type(d["symbol_count"]) is int)
        and (d["symbols_from"] is None or _c.line(d["symbols_from"]))
    )


def _fits_GpuArchs(d: Any) -> bool:
    return (
        type(d) is dict
        and d.keys() == _KEYS_GpuArchs
        and (_c.line(d["path"]))
        and (d["dist"] is None or _c.line(d["dist"]))
        and (
            type(d["cubins"]) is list
            and len(d["cubins"]) <= 1000
            and all(type(x0) is int for x0 in d["cubins"])
        )
        and (
            type(d["ptx"]) is list
            and len(d["ptx"]) <= 1000
            and all(type(x0) is int for x0 in d["ptx"])
        )
    )


def _fits_CompileKey(d: Any) -> bool:
    return (
        type(d) is dict
        and d.keys() == _KEYS_CompileKey
        and (d["cxx"] is None or _fits_Compiler(d["cxx"]))
        and (d["triton"] is None or _fits_TritonKey(d["triton"]))
        and (type(d["capabilities"]) is list and all(_c.line(x0) for x0 in d["capabilities"]))
    )


def _fits_Compiler(d: Any) -> bool:
    return (
        type(d) is dict
        and d.keys() == _KEYS_Compiler
        and (_c.line(d["name"]))
        and (d["path"] is None or _c.line(d["path"]))
        and (d["version"] is None or _c.line(d["version"]))
        and (d["error"] is None or _c.line(d["error"]))
    )


def _fits_TritonKey(d: Any) -> bool:
    return (
        type(d) is dict
        and d.keys() == _KEYS_TritonKey
        and (_c.bounded(d["version"], 256))
        and (d["digest"] is None or _c.matches(d["digest"], _PATTERN_0))
        and (type(d["files"]) is int)
        and (d["error"] is None or _c.line(d["error"]))
    )
