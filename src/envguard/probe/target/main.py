"""The probe's entry point: measure this interpreter, print one JSON document on stdout.

The document is the report (see envguard/probe/report.py, which validates it on the host),
or ``{"error": {"kind": ..., "message": ...}}`` when the probe itself failed. Its only input
is one JSON argument. It never imports an installed distribution (importing torch costs
seconds and can initialise CUDA), and the interpreter runs with ``-I -S``: no .pth file of
the target is executed.
"""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import os
import sys

from .checking import CHECK_SECONDS, Checking
from .compilekey import (
    cache_builds,
    capabilities,
    compiler,
    compiler_name,
    compiler_path,
    filesystem,
    mounts,
    triton_key,
)
from .confine import OUTSIDE, roots_for
from .distcache import QUIET_SECONDS, DistCache, cache_path, file_stamp
from .dists import reported, scan_packages, site_dirs
from .env import capture_env
from .fit import fit
from .forked import collect
from .gitrepos import probe_repos
from .hostlayer import Kept, host_layer
from .ldso import Loader
from .libs import Reader, libraries
from .loaded import confined_sites
from .reading import dump_json, named_by
from .system import (
    GPU_COLUMNS,
    accelerator,
    enter_venv,
    finish_version,
    gpu_answers,
    host_name,
    interpreter,
    start_tool,
    start_version,
    user_line,
    which,
)
from .torchbuild import torch_build
from .trees import default_caches, hash_files, not_walked, walk_tree

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

# Bumped when the report's shape changes; the host checks it (envguard/probe/report.py).
PROBE_VERSION = 9


# What the first steps of a probe depend on (begin()): the argument's keys they read.
_BEGUN_BY = ("overlay", "fingerprint_cache", "code", "cache_quiet_seconds")
if TYPE_CHECKING:
    Begun = Tuple[
        Dict[str, Any], List[str], List[str], DistCache, List[Dict[str, Any]], Optional[Checking]
    ]


def _begin(args: Dict[str, Any]) -> Begun:
    """(the keys of ``args`` it used, warnings, the sites, the distribution cache, the
    distributions): a probe's first steps."""
    enter_venv()  # before sysconfig computes any path
    warnings: List[str] = []
    sites = confined_sites(site_dirs(), sys.prefix, warnings)
    overlay = args.get("overlay")
    if type(overlay) is str and os.path.isdir(overlay):
        # guard's would-be venv: the wheels an install would bring, unpacked in a scratch
        # folder read ahead of the venv's own (which they shadow, as the install replaces).
        sites = [overlay, *sites]
    cached = DistCache(
        cache_path(dict(os.environ))
        if args.get("fingerprint_cache", True) and not overlay
        else None,
        sites,
        code=args.get("code"),
        quiet=float(args.get("cache_quiet_seconds", QUIET_SECONDS)),
    )
    packages = scan_packages(sites, warnings, cached)
    return _begun_by(args), warnings, sites, cached, packages, None


def _begun_by(args: Dict[str, Any]) -> Dict[str, Any]:
    return {key: (key in args, args.get(key)) for key in _BEGUN_BY}  # null is not absent


def begin(code: str) -> Optional[Begun]:
    """A probe's first steps for the argument a plain snapshot sends (its code key the
    payload's), taken by an interpreter booted early while it waits for its argument
    (payload.booting_payload): probe() uses them when its argument reads the same there,
    and takes them again otherwise; None when they failed (probe() reports why).

    The installed-files check is prepared here too (every RECORD read), as a plain probe
    asks for it (quick, by the default deadline): the preparation is the longest serial
    step of a probe. Its shares are forked once the argument asks for that check
    (Checking.start), so a boot stopped unused leaves no child behind; an argument that
    asks for another check drops it (Checking.cancel) and prepares its own."""
    try:
        begun = _begin({"code": code})
    except Exception:
        return None
    try:
        checking = Checking(begun[4], "quick", begun[3], started=False)
    except Exception:
        return begun  # probe() prepares it again, and says what failed
    return (*begun[:5], checking)


def probe(args: Dict[str, Any], begun: Optional[Begun] = None) -> Dict[str, Any]:
    """Everything the snapshot needs from this side, as plain JSON-able data."""
    environ = dict(os.environ)
    # Where /proc, /sys and /etc are read from for the host layer: "" but in tests.
    root = str(args.get("host_root") or "")
    # Slow external tools run while the file system is read. nvidia-smi reads the live
    # driver: asked at every probe (where it is on PATH), all its columns at once.
    smi = start_tool(["nvidia-smi", "--query-gpu=" + GPU_COLUMNS, "--format=csv,noheader"])
    if begun is not None and begun[0] != _begun_by(args):
        if begun[5] is not None:
            begun[5].cancel()
        begun = None
    if begun is None:
        begun = _begin(args)
    _, warnings, sites, cached, packages, early = begun
    # nvcc's and the C++ compiler's answers are their binaries': kept while those are
    # unchanged (the compiler torch inductor would call, named by this environment).
    nvcc = start_version(which("nvcc"), cached)
    cxx_name = compiler_name(environ)
    cxx_path = compiler_path(cxx_name, environ)
    cxx = start_version(cxx_path, cached, timeout=5.0)
    # Installed files against RECORD, while this thread waits on git and nvidia-smi.
    seconds = args.get("verify_seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        seconds = CHECK_SECONDS
    mode, timeout = args.get("verify", "quick"), min(max(seconds, 0.0), 86400.0)
    if early is not None and (mode, timeout) == ("quick", CHECK_SECONDS):
        checking = early  # prepared as this argument asks
        checking.start()
    else:
        if early is not None:
            early.cancel()
        overlay = args.get("overlay")
        overlay = overlay if type(overlay) is str and overlay in sites else None
        checking = Checking(packages, mode, cached, timeout=timeout, overlay=overlay)
    torch = torch_build(packages, warnings)
    pid = args.get("pid")
    pid = pid if type(pid) is int and pid > 0 else None
    # One loader (and its reader of ELF files) for both: each follows torch's import.
    loader = Loader(Reader(cached), environ, warnings)
    libs = libraries(sites, packages, torch, environ, warnings, cached, pid, loader=loader)
    fits = fit(sites, packages, torch, environ, warnings, cached, loader=loader)
    caches = []
    own = default_caches(environ)
    # Paths named by a snapshot (not by the user) are read only under these roots.
    roots = roots_for(args, str(args.get("cwd") or os.getcwd()), own)
    capture = args.get("default_caches", True)
    wanted = own if capture else []
    wanted += [(c["kind"], c["path"]) for c in args.get("caches", [])]
    # A capture records a folder once: a --cache naming the folder a default cache is
    # (through a symlink too) is that cache, under its named kind (the defaults come first).
    # A snapshot's own list is measured as written: an older file may hold a folder twice,
    # and each of its entries needs its live record.
    folders = set()
    table = mounts()
    for kind, path in wanted:
        # A recorded path a snapshot sends back (an odd folder's, escaped) names that folder.
        full = named_by(os.path.abspath(os.path.expanduser(path)))
        if capture:
            folder = os.path.realpath(full)
            if folder in folders:
                continue
            folders.add(folder)
        builds = []
        if roots.admits(full, cache=True):
            cache = walk_tree(full, warnings)
            if cache["exists"]:
                builds = cache_builds(full, warnings)
        else:
            cache = not_walked(full)
            cache["error"] = OUTSIDE + " (--allow PATH reads it)"
        cache["kind"] = kind
        cache["fs"] = filesystem(full, table)
        cache["builds"] = builds
        if cache["unreadable_dirs"]:
            warnings.append(
                "%s: %d unreadable entries not counted" % (cache["path"], cache["unreadable_dirs"])
            )
        caches.append(cache)
    if args.get("git") and isinstance(args.get("repos"), list):
        # A repo in a folder named with U+202E was recorded as its escape (gitrepos.py):
        # that folder, where a snapshot sends it back.
        args = dict(args, repos=[named_by(r) if type(r) is str else r for r in args["repos"]])
    repos = probe_repos(args, packages, roots) if args.get("git") else []
    # Reads that do not need the check's answer, while its shares still work (after their
    # answer, each millisecond here was one the host waited for); their warnings are said
    # after the check's, as ever. The waits on tools come after it: one that hangs must not
    # eat the check's deadline.
    later: List[str] = []
    triton = triton_key(packages, later, cached)
    layer = host_layer(environ, root, Kept(cached, file_stamp))
    env = capture_env(environ, later) if args.get("env", True) else {}
    # The report's own facts too (pwd's import among them, where the environment names no
    # user): each millisecond after the check's answer is one the host waits for.
    host, user, python = host_name(), user_line(), interpreter(sites)
    on_disk = checking.result(warnings)
    if on_disk["clashes"] is not None and environ.get("PYTHONPYCACHEPREFIX"):
        # Python then loads bytecode from that tree and ignores __pycache__ (PEP 3147's
        # folders, which the check compares with their sources).
        warnings.append(
            "PYTHONPYCACHEPREFIX is set: the bytecode Python loads from that folder is not "
            "compared with its sources"
        )
    warnings.extend(later)
    gpus, caps = gpu_answers(smi)
    nvcc_text = finish_version(nvcc, cached)
    cxx_text = finish_version(cxx, cached)
    cached.save()
    return {
        "probe_version": PROBE_VERSION,
        "host": host,
        "user": user,
        "interpreter": python,
        "packages": reported(packages),
        "torch": torch,
        "clashes": on_disk["clashes"],
        "unowned": on_disk["unowned"],
        "libraries": libs,
        "fit": fits,
        "files": hash_files(args.get("files", []), roots),
        "repos": repos,
        "caches": caches,
        "env": env,
        "accelerator": accelerator(gpus, nvcc_text, proc=root + "/proc"),
        "host_layer": layer,
        "compile": {
            "cxx": compiler(cxx_name, cxx_path, cxx_text),
            "triton": triton,
            "capabilities": capabilities(caps),
        },
        "warnings": warnings,
    }


def ended() -> None:
    """The report is written and flushed: its pipes are closed now, so the host reads them
    to their end while this process ends (the kernel frees its memory first, a millisecond
    the host waited for with its answer in hand); then the check's children, which answered
    already, are collected."""
    for fd in (1, 2):
        try:
            os.close(fd)
        except OSError:
            pass
    collect()


def error(kind: str, message: str) -> str:
    """The one JSON error object the host reads instead of a report."""
    return dump_json({"probe_version": PROBE_VERSION, "error": {"kind": kind, "message": message}})


def main(args: Dict[str, Any], begun: Optional[Begun] = None) -> int:
    """Print the report (exit 0) or a JSON error object (exit 1); ``begun``: begin()'s."""
    try:
        text = dump_json(probe(args, begun))
    except MemoryError:
        text, code = error("memory", "ran out of memory while measuring"), 1
    except Exception as exc:  # reported to the host as data, never as a traceback
        text, code = error("failed", "%s: %s" % (type(exc).__name__, exc)), 1
    else:
        code = 0
    sys.stdout.write(text)
    sys.stdout.flush()
    return code
