"""GENERATED from probe/report_shape.py by `python -m envguard.dev regenerate`: do not edit.

The spec the probe's report (its TypedDicts) is checked against:
("fields", {key: kind}, optional keys) for an object; ("?", kind) may be null;
("list", kind); ("map", kind) with line keys; "line", "text", "host", "int", "bool",
"number", "object".
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not loaded for a command's start

if TYPE_CHECKING:
    from typing import Any

REPORT_SPEC: Any = (
    "fields",
    {
        "probe_version": "int",
        "host": "host",
        "user": "line",
        "interpreter": (
            "fields",
            {
                "version": "line",
                "implementation": "line",
                "executable": "line",
                "prefix": "line",
                "base_prefix": "line",
                "is_venv": "bool",
                "os": "line",
                "machine": "line",
                "libc": (
                    "?",
                    "line",
                ),
                "site_packages": (
                    "list",
                    "line",
                ),
                "markers": (
                    "map",
                    "line",
                ),
            },
            frozenset([]),
        ),
        "packages": (
            "list",
            (
                "fields",
                {
                    "name": "line",
                    "display_name": "line",
                    "version": "line",
                    "location": "line",
                    "metadata_dir": "line",
                    "installer": (
                        "?",
                        "line",
                    ),
                    "requested": "bool",
                    "direct_url": (
                        "?",
                        "object",
                    ),
                    "fingerprint": (
                        "?",
                        "line",
                    ),
                    "shadowed": "bool",
                    "requires": (
                        "list",
                        "line",
                    ),
                    "on_disk": (
                        "?",
                        (
                            "fields",
                            {
                                "checked": "int",
                                "modified": (
                                    "list",
                                    "line",
                                ),
                                "missing": (
                                    "list",
                                    "line",
                                ),
                                "added": (
                                    "list",
                                    "line",
                                ),
                                "clobbered": (
                                    "list",
                                    "line",
                                ),
                                "more": "int",
                            },
                            frozenset([]),
                        ),
                    ),
                },
                frozenset([]),
            ),
        ),
        "torch": (
            "?",
            (
                "fields",
                {
                    "version": "line",
                    "cuda": (
                        "?",
                        "line",
                    ),
                    "git_version": (
                        "?",
                        "line",
                    ),
                    "hip": (
                        "?",
                        "line",
                    ),
                    "debug": (
                        "?",
                        "bool",
                    ),
                },
                frozenset([]),
            ),
        ),
        "clashes": (
            "?",
            (
                "list",
                (
                    "fields",
                    {
                        "path": "line",
                        "claimants": (
                            "list",
                            (
                                "fields",
                                {"name": "line", "version": "line"},
                                frozenset([]),
                            ),
                        ),
                        "owner": (
                            "?",
                            "line",
                        ),
                    },
                    frozenset([]),
                ),
            ),
        ),
        "unowned": (
            "?",
            (
                "list",
                "line",
            ),
        ),
        "libraries": (
            "list",
            (
                "fields",
                {
                    "name": "line",
                    "path": "line",
                    "dist": (
                        "?",
                        "line",
                    ),
                    "metadata_version": (
                        "?",
                        "line",
                    ),
                    "also_claimed_by": (
                        "list",
                        "line",
                    ),
                    "soname": (
                        "?",
                        "line",
                    ),
                    "embedded_version": (
                        "?",
                        "line",
                    ),
                    "version_source": (
                        "?",
                        "line",
                    ),
                    "loader_pick": (
                        "?",
                        "line",
                    ),
                    "loader_pick_why": (
                        "?",
                        "line",
                    ),
                    "loader_pick_version": (
                        "?",
                        "line",
                    ),
                    "mapped": (
                        "?",
                        "line",
                    ),
                    "error": (
                        "?",
                        "line",
                    ),
                },
                frozenset([]),
            ),
        ),
        "fit": (
            "fields",
            {
                "checked": "int",
                "broken": (
                    "list",
                    (
                        "fields",
                        {
                            "path": "line",
                            "dist": (
                                "?",
                                "line",
                            ),
                            "missing": (
                                "list",
                                "line",
                            ),
                            "versions": (
                                "list",
                                "line",
                            ),
                            "symbols": (
                                "list",
                                "line",
                            ),
                            "symbol_count": "int",
                            "symbols_from": (
                                "?",
                                "line",
                            ),
                        },
                        frozenset([]),
                    ),
                ),
                "archs": (
                    "list",
                    (
                        "fields",
                        {
                            "path": "line",
                            "dist": (
                                "?",
                                "line",
                            ),
                            "cubins": (
                                "list",
                                "int",
                            ),
                            "ptx": (
                                "list",
                                "int",
                            ),
                        },
                        frozenset([]),
                    ),
                ),
            },
            frozenset([]),
        ),
        "files": (
            "list",
            (
                "fields",
                {
                    "path": "line",
                    "sha256": (
                        "?",
                        "line",
                    ),
                    "size": (
                        "?",
                        "int",
                    ),
                    "mode": (
                        "?",
                        "int",
                    ),
                    "error": (
                        "?",
                        "line",
                    ),
                },
                frozenset([]),
            ),
        ),
        "repos": (
            "list",
            (
                "fields",
                {
                    "path": "line",
                    "head": (
                        "?",
                        "line",
                    ),
                    "branch": (
                        "?",
                        "line",
                    ),
                    "dirty": "bool",
                    "diff_sha256": (
                        "?",
                        "line",
                    ),
                    "untracked": "int",
                    "remote": (
                        "?",
                        "line",
                    ),
                    "error": (
                        "?",
                        "line",
                    ),
                },
                frozenset(["branch", "diff_sha256", "dirty", "head", "remote", "untracked"]),
            ),
        ),
        "caches": (
            "list",
            (
                "fields",
                {
                    "kind": "line",
                    "path": "line",
                    "exists": "bool",
                    "readable": "bool",
                    "bytes": "int",
                    "files": "int",
                    "newest_mtime": (
                        "?",
                        "number",
                    ),
                    "unreadable_dirs": "int",
                    "error": (
                        "?",
                        "line",
                    ),
                    "fs": (
                        "?",
                        "line",
                    ),
                    "builds": (
                        "list",
                        (
                            "fields",
                            {
                                "torch": (
                                    "?",
                                    "line",
                                ),
                                "git_version": (
                                    "?",
                                    "line",
                                ),
                                "torch_key": (
                                    "?",
                                    "line",
                                ),
                                "system": (
                                    "?",
                                    "line",
                                ),
                                "cxx": (
                                    "?",
                                    "line",
                                ),
                                "device": (
                                    "?",
                                    "line",
                                ),
                                "triton": (
                                    "?",
                                    "line",
                                ),
                                "entries": "int",
                            },
                            frozenset([]),
                        ),
                    ),
                },
                frozenset([]),
            ),
        ),
        "env": (
            "map",
            "text",
        ),
        "accelerator": (
            "fields",
            {
                "present": "bool",
                "driver": (
                    "?",
                    "line",
                ),
                "gpus": (
                    "list",
                    "line",
                ),
                "count": "int",
                "nvcc": (
                    "?",
                    "line",
                ),
                "source": (
                    "?",
                    "line",
                ),
            },
            frozenset([]),
        ),
        "host_layer": (
            "fields",
            {
                "gpu_devices": (
                    "list",
                    "line",
                ),
                "nccl_conf": (
                    "list",
                    (
                        "fields",
                        {
                            "path": "line",
                            "sha256": (
                                "?",
                                "line",
                            ),
                            "keys": (
                                "map",
                                "line",
                            ),
                            "error": (
                                "?",
                                "line",
                            ),
                        },
                        frozenset([]),
                    ),
                ),
                "net_plugins": (
                    "list",
                    (
                        "fields",
                        {
                            "name": "line",
                            "path": "line",
                            "sha256": (
                                "?",
                                "line",
                            ),
                        },
                        frozenset([]),
                    ),
                ),
                "net_plugin": (
                    "?",
                    "line",
                ),
                "peermem": (
                    "?",
                    "bool",
                ),
                "infiniband": (
                    "list",
                    "line",
                ),
                "ofed": (
                    "?",
                    "line",
                ),
                "container": (
                    "?",
                    (
                        "fields",
                        {
                            "runtime": "line",
                            "image": (
                                "?",
                                "line",
                            ),
                            "digest": (
                                "?",
                                "line",
                            ),
                            "id": (
                                "?",
                                "line",
                            ),
                        },
                        frozenset([]),
                    ),
                ),
            },
            frozenset([]),
        ),
        "compile": (
            "fields",
            {
                "cxx": (
                    "fields",
                    {
                        "name": "line",
                        "path": (
                            "?",
                            "line",
                        ),
                        "version": (
                            "?",
                            "line",
                        ),
                        "error": (
                            "?",
                            "line",
                        ),
                    },
                    frozenset([]),
                ),
                "triton": (
                    "?",
                    (
                        "fields",
                        {
                            "version": "line",
                            "digest": (
                                "?",
                                "line",
                            ),
                            "files": "int",
                            "error": (
                                "?",
                                "line",
                            ),
                        },
                        frozenset([]),
                    ),
                ),
                "capabilities": (
                    "list",
                    "line",
                ),
            },
            frozenset([]),
        ),
        "warnings": (
            "list",
            "text",
        ),
    },
    frozenset([]),
)
