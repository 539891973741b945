"""What must match across the ranks of one training job, as plain data: the rank gate's
fingerprint (envguard/distributed.py hashes it and exchanges only the hash).

Packages with their builds (the version's local label: 2.13.0+cpu) and RECORD fingerprints
(what each installed file's hash is, as the installer wrote it), the installed files that
are not what RECORD says (edited in place, missing, added: the quick check of
``envguard check``), the GPU libraries with the version their bytes say and the copy the
loader would give torch (the libraries section), torch's build from its version.py, the
NVIDIA driver from the kernel module, the host layer's part that must match
(hostlayer.gated), and the environment variables the caller names. Read through the
probe's distribution cache, so an unchanged, settled venv costs a stat per .dist-info
folder and per file that runs; nothing installed is imported and no tool is started.
"""

# ruff: noqa: UP006, UP035
from __future__ import annotations

import fnmatch
import os
import sys

from .distcache import DistCache, cache_path
from .dists import scan_packages, site_dirs
from .hostlayer import gated, host_layer
from .installed import check_installed
from .libs import libraries
from .redact import is_secret_name, redact_text, secret_digest
from .system import accelerator
from .torchbuild import torch_build

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Sequence

# The variables compared when the caller names none: NCCL's own change how ranks talk.
DEFAULT_ENV = ("NCCL_*",)


def chosen_env(environ: Dict[str, str], patterns: Sequence[str]) -> Dict[str, str]:
    """The variables matching ``patterns`` (fnmatch, case-sensitive); a secret's value
    becomes a salted hash and URLs lose their credentials, as in a snapshot."""
    out = {}
    for name in sorted(environ):
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            value = environ[name]
            out[name] = secret_digest(name, value) if is_secret_name(name) else redact_text(value)
    return out


# The lists of a distribution's on-disk check that the gate compares (clobbered files are
# a clash between two distributions of one node, said by check, not a node's difference).
_ON_DISK = ("modified", "missing", "added")


def installed_truth(scanned: List[Dict[str, Any]]) -> Dict[str, Dict[str, List[str]]]:
    """The distributions whose installed files are not what their RECORD says, with those
    paths (at most installed.MAX_LISTED per list)."""
    out = {}
    for dist in scanned:
        on_disk = dist.get("on_disk")
        if dist["shadowed"] or not on_disk:
            continue
        lists = {k: sorted(on_disk.get(k) or []) for k in _ON_DISK}
        if any(lists.values()):
            out[dist["name"]] = lists
    return out


def fingerprint(args: Dict[str, Any]) -> Dict[str, Any]:
    """This interpreter's fingerprint. ``args``: ``env`` (patterns of variable names),
    ``code`` (what the distribution cache is tied to; the probe's own key, so the gate and
    ``envguard snapshot`` keep one cache), ``fingerprint_cache`` (False: no cache)."""
    environ = dict(os.environ)
    root = str(args.get("host_root") or "")  # fake /proc, /sys, /etc trees: tests only
    sites = site_dirs()
    cache = DistCache(
        cache_path(environ) if args.get("fingerprint_cache", True) else None,
        sites,
        code=args.get("code"),
    )
    warnings: List[str] = []
    scanned = scan_packages(sites, warnings, cache)
    check_installed(scanned, "quick", warnings, cache)
    packages = {
        p["name"]: [p["version"], p.get("fingerprint")] for p in scanned if not p["shadowed"]
    }
    build = torch_build(scanned, warnings)
    libs = libraries(sites, scanned, build, environ, warnings, cache)
    cache.save()
    torch = None
    if build is not None:
        torch = {k: build[k] for k in ("version", "cuda", "hip", "git_version")}
    return {
        "python": "%s %d.%d.%d" % (sys.implementation.name, *sys.version_info[:3]),
        "packages": packages,
        "installed": installed_truth(scanned),
        "libraries": {e["path"]: [e.get("embedded_version"), e.get("loader_pick")] for e in libs},
        "torch": torch,
        "driver": accelerator(None, None, root + "/proc")["driver"],
        "env": chosen_env(environ, args.get("env") or DEFAULT_ENV),
        # The host under the venv that must match across nodes (GPUs on the bus, NCCL's net
        # plugins and config files, peermem): a function of the host layer, as a snapshot
        # records it too (distributed.snapshot_detail).
        "host": gated(host_layer(environ, root)),
    }
