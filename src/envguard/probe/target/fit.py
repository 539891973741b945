"""Will it load? Each compiled extension in site-packages that takes symbols from torch's or
the CUDA libraries, against the libraries the loader will give it, from the files alone.

For each one: its DT_NEEDED, found as ld.so finds them (ldso.Loader) after ``import torch``
loaded torch's own (torch/_C and its libraries, which later extensions get by name whatever
their RPATH says, and the CUDA libraries torch preloads); its version needs
(.gnu.version_r) against the versions each library defines (.gnu.version_d); and each of its
undefined symbols (not weak: Python opens extensions with RTLD_NOW) against the exports of
every object in its scope: its own dependency tree, the interpreter and the libraries torch
loads RTLD_GLOBAL. What it cannot find is what ``import`` would fail on.

Nothing is loaded or imported. Reads are bounded (symbols.py); a file that cannot be read is
a warning naming it. A result is kept in the distribution cache under the stamps of the
extension and of every object in its scope: an unchanged venv reads no symbol table again.
"""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import os
import struct
import sys

from .distcache import file_stamp
from .elf import ElfError
from .fatbin import gpu_archs
from .ldso import Loader, is_gpu, torch_loads
from .libs import Reader, kept_rows, where
from .reading import UNSAFE_CHARS, Regex, escaped_name
from .symbols import Symbols

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

    from .distcache import DistCache

# torch's own libraries, by file name prefix.
_TORCH_LIBS = ("libc10", "libtorch", "libshm", "libcaffe2")
# The NVIDIA driver's libraries: the node's, not the venv's (a build or CI machine has none);
# their absence is the driver check's to weigh, and so are the symbols of their APIs.
_DRIVER_LIBS = ("libcuda.so", "libnvidia-ml.so")

# Extensions looked at, and objects in one extension's tree: past these, a warning.
_MAX_EXTENSIONS = 2048
_MAX_TREE = 512
# Undefined symbols looked up per extension (real ones: a few thousand).
_MAX_UNDEFINED = 100000
# Names kept per entry; the rest are counted.
_MAX_LISTED = 20
_MAX_NAME = 300
# A build tag in a file name: _cu12, -cu130, _cuda12, _cpu, _rocm6.4 before the suffix
# (_variants() removes them without re).
_BUILD_TAG = Regex(r"[_-](?:cu\d{2,3}|cuda\d{0,3}|cpu|rocm[\d.]*)(?=\.)")
_BAD = set(chr(c) for c in range(0x20)) | set(chr(c) for c in range(0x7F, 0xA0))


def _torch_lib(name: str) -> bool:
    return name.startswith(_TORCH_LIBS)


def _cuda_lib(name: str) -> bool:
    return is_gpu(name) or name.startswith(("libcuda.so", "libnvrtc", "libnvjpeg"))


def _shown(name: bytes) -> str:
    """A symbol or library name as a report may carry it: one line, bounded."""
    text = name.decode("utf-8", "replace")
    text = "".join("?" if c in _BAD or c in UNSAFE_CHARS else c for c in text)
    return text if len(text) <= _MAX_NAME else text[: _MAX_NAME - 3] + "..."


def _extension_row(path: str) -> bool:
    """A RECORD row that may name an extension: a .so inside site-packages, not one of
    torch's or NVIDIA's libraries nor auditwheel's vendored copies (``x.libs/``), which
    are loaded as an extension's tree."""
    name = path.rsplit("/", 1)[-1]
    if not (name.endswith(".so") or ".so." in name):
        return False
    if path.startswith(("/", "../", "nvidia/", "torch/lib/")) or "/../" in path:
        return False
    return not path.split("/", 1)[0].endswith(".libs")


class _Opened:
    """Symbols objects opened once per probe; a file that cannot be read said once."""

    def __init__(self, warnings: List[str], sites: List[str]) -> None:
        self.warnings = warnings
        self.sites = sites
        self.held: Dict[str, Optional[Symbols]] = {}
        self.exported: Dict[Tuple[str, bytes, Optional[bytes]], Optional[bool]] = {}

    def get(self, path: str) -> Optional[Symbols]:
        if path not in self.held:
            try:
                self.held[path] = Symbols(path)
            except (ElfError, OSError, struct.error, ValueError) as exc:
                self.held[path] = None
                self.warnings.append(
                    "%s: its symbols cannot be read (%s); taken to export what is asked"
                    % (where(path, self.sites), exc)
                )
        return self.held[path]

    def exports(self, path: str, name: bytes, version: Optional[bytes]) -> Optional[bool]:
        key = (path, name, version)
        if key not in self.exported:
            found = self.get(path)
            answer: Optional[bool] = None
            if found is not None:
                try:
                    answer = found.exports(name, version)
                except (ElfError, OSError, struct.error, ValueError) as exc:
                    self.warnings.append(
                        "%s: its symbols cannot be looked up (%s); taken to export what is asked"
                        % (where(path, self.sites), exc)
                    )
                    found.close()
                    self.held[path] = None  # said once: not asked again
            self.exported[key] = answer
        return self.exported[key]

    def close(self) -> None:
        for held in self.held.values():
            if held is not None:
                held.close()


class _Tree:
    """An object's dependency tree as ld.so builds it: breadth first, a name already loaded
    (by torch's import, or earlier in this tree) being that object."""

    def __init__(self, loader: Loader, loaded: Dict[str, str]) -> None:
        self.loader = loader
        self.loaded = loaded
        self.objects: List[str] = []
        self.missing: List[Tuple[str, str]] = []  # (name, the object that needs it)
        self.by_name: Dict[str, str] = {}
        self.truncated = False

    def walk(self, root: str) -> None:
        reader = self.loader.reader
        queue = [root]
        seen = {root}
        while queue:
            path = queue.pop(0)
            self.objects.append(path)
            if len(self.objects) > _MAX_TREE:
                self.truncated = True
                return
            for name in reader.read(path)["needed"]:
                found = self.by_name.get(name) or self.loaded.get(name)
                if found is None:
                    hit = self.loader.find(name, path)
                    found = hit[0] if hit is not None else None
                if found is None:
                    if name not in [m[0] for m in self.missing]:
                        self.missing.append((name, path))
                    continue
                self.by_name[name] = found
                soname = reader.read(found)["soname"]
                if soname:
                    self.by_name.setdefault(soname, found)
                if found not in seen:
                    seen.add(found)
                    queue.append(found)


def fit(
    sites: List[str],
    packages: List[Dict[str, Any]],
    torch: Optional[Dict[str, Any]],
    environ: Dict[str, str],
    warnings: List[str],
    cache: Optional[DistCache] = None,
    loader: Optional[Loader] = None,
) -> Dict[str, Any]:
    """{"checked": extensions looked at, "broken": one entry per extension that cannot
    load, "archs": the GPU archs of each that loads and carries a fatbin}; see the module
    docstring. ``loader``: libraries()'s, which followed torch's import already."""
    if loader is None:
        loader = Loader(Reader(cache), environ, warnings)
    reader = loader.reader
    owners: Dict[str, str] = {}
    folders: Dict[str, str] = {}  # folder -> its real path
    extensions: List[Tuple[str, str]] = []  # (real path, path relative to its site)
    # site -> what a real path inside it starts with: the site's path, and its real path
    # where a link leads to it (a symlinked .venv; its files' real paths start there)
    inside: Dict[str, Tuple[str, str]] = {}
    for dist in packages:
        # A shadowed distribution's files are not what import finds (guard's would-be venv:
        # the one the install replaces).
        if not dist["metadata_dir"].endswith(".dist-info") or dist["shadowed"]:
            continue
        site = dist["location"]
        record = os.path.join(site, dist["metadata_dir"], "RECORD")
        starts = inside.get(site)
        if starts is None:
            base = site.rstrip("/")
            starts = inside[site] = (base + "/", reader.real(base) + "/")
        for rel in kept_rows(reader, record, "EXTENSIONS", _extension_row):
            real = _real(os.path.join(site, rel), folders)
            if real is None or not real.startswith(starts):
                continue
            if real in owners:
                continue
            owners[real] = "%s %s" % (dist["name"], dist["version"])
            extensions.append((real, rel))
    if len(extensions) > _MAX_EXTENSIONS:
        warnings.append(
            "%d compiled files in site-packages; the first %d checked for fit"
            % (len(extensions), _MAX_EXTENSIONS)
        )
        del extensions[_MAX_EXTENSIONS:]
    wanted: List[Tuple[str, str]] = []
    for real, rel in extensions:
        read = reader.read(real)
        if read["error"] is not None:
            if not os.path.basename(real).startswith("lib"):  # a library may be a linker script
                warnings.append("%s: %s; its fit not checked" % (rel, read["error"]))
            continue
        if any(_torch_lib(n) or _cuda_lib(n) for n in read["needed"]):
            wanted.append((real, rel))
    out: Dict[str, Any] = {"checked": len(wanted), "broken": [], "archs": []}
    if not wanted:
        return out
    torch_dist = next((p for p in packages if p["name"] == "torch" and not p["shadowed"]), None)
    loaded: Dict[str, str] = {}
    glob: List[str] = []
    main_ext: Optional[str] = None
    label: Optional[str] = None
    if torch_dist is not None:
        label = "torch %s" % torch_dist["version"]
        cuda = torch.get("cuda") if torch else None
        picks = torch_loads(torch_dist["location"], sites, cuda, loader)
        loaded.update({name: path for name, (path, _) in picks.items()})
        main_ext = _torch_extension(torch_dist["location"], wanted)
    interpreter = _interpreter()
    if interpreter is not None:
        tree = _Tree(loader, dict(loaded))
        tree.walk(interpreter)
        glob += tree.objects
    torch_tree: Optional[_Tree] = None
    if main_ext is not None and torch_dist is not None:
        deps = os.path.realpath(
            os.path.join(torch_dist["location"], "torch/lib/libtorch_global_deps.so")
        )
        if os.path.isfile(deps):  # dlopened RTLD_GLOBAL by torch/__init__.py
            tree = _Tree(loader, dict(loaded))
            tree.walk(deps)
            glob += tree.objects
        torch_tree = _Tree(loader, dict(loaded))
        torch_tree.walk(main_ext)
        for name, path in torch_tree.by_name.items():
            loaded.setdefault(name, path)
    opened = _Opened(warnings, sites)
    fitting = set()  # variant groups with a build that loads
    stamped: Dict[str, Optional[str]] = {}
    try:
        for real, rel in wanted:
            if real == main_ext and torch_tree is not None:
                tree = torch_tree
            else:
                tree = _Tree(loader, loaded)
                tree.walk(real)
            if tree.truncated:
                warnings.append(
                    "%s: more than %d objects in its tree; not checked" % (rel, _MAX_TREE)
                )
                continue
            scope = list(tree.objects)
            if torch_tree is not None and any(p in torch_tree.objects for p in scope):
                scope += [p for p in torch_tree.objects if p not in scope]
            scope += [p for p in glob if p not in scope]
            needs_torch = any(_torch_lib(n) for n in reader.read(real)["needed"])
            entry = _kept(reader, real, scope, tree, stamped)
            if entry is None:
                entry = _check(real, tree, scope, opened, warnings, rel)
                if entry is None:
                    continue
                _keep(reader, real, scope, tree, entry, stamped)
            if entry["missing"] or entry["versions"] or entry["symbol_count"]:
                entry = dict(entry, path=rel, dist=owners.get(real))
                entry["symbols_from"] = label if needs_torch else None
                out["broken"].append(entry)
            else:
                fitting.add(_variants(rel))
    finally:
        opened.close()
    out["broken"] = sorted(
        (e for e in out["broken"] if _variants(e["path"]) not in fitting),
        key=lambda e: e["path"],
    )
    unfit = set(e["path"] for e in out["broken"])
    for real, rel in wanted:
        if rel not in unfit:
            archs = _archs(reader, real, rel, warnings)
            if archs is not None:
                out["archs"].append(dict(archs, path=rel, dist=owners.get(real)))
    out["archs"].sort(key=lambda e: e["path"])
    # A RECORD may name a file anything a file system allows, and a library the loader
    # finds lie in a folder so named: one line each, escaped (a kept entry's own lists are
    # never changed in place).
    for entry in out["broken"] + out["archs"]:
        entry["path"] = escaped_name(entry["path"])
    for entry in out["broken"]:
        entry["missing"] = [escaped_name(m) for m in entry["missing"]]
    return out


def _archs(reader: Reader, real: str, rel: str, warnings: List[str]) -> Optional[Dict[str, Any]]:
    """{"cubins", "ptx"} of the fatbin of ``real`` (None: it has none, or it cannot be read,
    which is said), kept in the distribution cache under its stamp."""
    stamp = file_stamp(real)
    if reader.cache is not None:
        held = reader.cache.lib("ARCHS\0" + real, stamp)
        if held is not None and _plausible_archs(held.get("archs")):
            archs: Optional[Dict[str, Any]] = held["archs"]
            return archs
    try:
        archs = gpu_archs(real)
    except (ElfError, OSError, struct.error, ValueError) as exc:
        warnings.append(
            "%s: its fatbin cannot be read (%s); its GPU archs not checked" % (rel, exc)
        )
        return None
    if reader.cache is not None:
        reader.cache.keep_lib("ARCHS\0" + real, stamp, {"archs": archs})
    return archs


def _plausible_archs(archs: Any) -> bool:
    """A kept record has the shape gpu_archs() makes."""
    if archs is None:
        return True
    return (
        type(archs) is dict
        and set(archs) == {"cubins", "ptx"}
        and all(type(v) is list and all(type(x) is int for x in v) for v in archs.values())
    )


def _variants(rel: str) -> str:
    """The group of builds ``rel`` is one of: its path less a build tag (x_cu12.abi3.so,
    x_cu13.abi3.so and x.abi3.so are one group). A package that ships one build per CUDA
    major opens the one that loads; the group fits when one of them does. _BUILD_TAG.sub's
    answer, told by string operations: every probe of a torch venv asks (libtorch_cpu.so),
    and re's import (with enum) is 8 ms of its CPU."""
    if not any(start in rel for start in _TAG_STARTS):
        return rel
    kept, at, here = [], 0, 0
    while here < len(rel):
        end = _tag_end(rel, here + 1) if rel[here] in "_-" else None
        if end is None:
            here += 1
            continue
        kept.append(rel[at:here])
        at = here = end
    kept.append(rel[at:])
    return "".join(kept)


# What a build tag begins with; a name holding none of these has none.
_TAG_STARTS = ("_cu", "-cu", "_cpu", "-cpu", "_rocm", "-rocm")


def _tag_end(text: str, at: int) -> Optional[int]:
    """Where the build tag _BUILD_TAG reads at ``at`` (after its "_" or "-") ends, tried
    as the pattern tries it (its alternatives in turn, each run of digits longest first),
    a "." after it; None when there is none. (\\d is str.isdecimal().)"""

    def run(start: int, most: int, dots: bool = False) -> int:
        end = start
        while end < len(text) and end - start < most:
            if not (text[end].isdecimal() or (dots and text[end] == ".")):
                break
            end += 1
        return end - start

    if text.startswith("cu", at):
        digits = run(at + 2, 3)
        for count in (3, 2):
            if digits >= count and text.startswith(".", at + 2 + count):
                return at + 2 + count
        if text.startswith("cuda", at):
            for count in range(run(at + 4, 3), -1, -1):
                if text.startswith(".", at + 4 + count):
                    return at + 4 + count
    if text.startswith("cpu.", at):
        return at + 3
    if text.startswith("rocm", at):
        for count in range(run(at + 4, len(text), dots=True), -1, -1):
            if text.startswith(".", at + 4 + count):
                return at + 4 + count
    return None


def _real(path: str, folders: Dict[str, str]) -> Optional[str]:
    """The real path of the regular file ``path`` (None: absent, or not a regular file),
    its folder resolved once for all its files (realpath of each costs a stat per part)."""
    import stat

    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISLNK(mode):
        real = os.path.realpath(path)
        return real if os.path.isfile(real) else None
    if not stat.S_ISREG(mode):
        return None
    folder, name = os.path.split(path)
    if folder not in folders:
        folders[folder] = os.path.realpath(folder)
    return os.path.join(folders[folder], name)


def _torch_extension(torch_site: str, wanted: List[Tuple[str, str]]) -> Optional[str]:
    """torch/_C's real path: the extension ``import torch`` loads first."""
    for real, rel in wanted:
        if rel.startswith("torch/_C.") and os.path.dirname(rel) == "torch":
            return real
    return None


def _interpreter() -> Optional[str]:
    """The interpreter's executable (its exports, Py*, are every extension's)."""
    path = os.path.realpath(sys.executable) if sys.executable else ""
    return path if path and os.path.isfile(path) else None


def _check(
    real: str,
    tree: _Tree,
    scope: List[str],
    opened: _Opened,
    warnings: List[str],
    rel: str,
) -> Optional[Dict[str, Any]]:
    """The entry of one extension: what its tree lacks, computed from the symbol tables."""
    reader = opened
    entry: Dict[str, Any] = {
        "missing": [
            name if asker == real else "%s (needed by %s)" % (name, where(asker, opened.sites))
            for name, asker in tree.missing
            if not name.startswith(_DRIVER_LIBS)
        ],
        "versions": [],
        "symbols": [],
        "symbol_count": 0,
    }
    own = reader.get(real)
    if own is None:
        return None
    name = os.path.basename(real)
    if name.startswith("lib"):
        # A library, not a module: what import or torch.ops.load_library loads exports
        # PyInit_<name> or is named as a module is; a lib*.so without it is opened by its
        # package's own code, when it applies (an addon per torch release, a plugin per
        # FFmpeg version), and is checked where an extension needs it.
        module = name.split(".", 1)[0].encode("utf-8", "replace")
        try:
            exported = own.exports(b"PyInit_" + module, None)
        except (ElfError, OSError, struct.error, ValueError):
            exported = None
        if exported is False:
            return dict(entry, missing=[])
    try:
        needs = own.needs()
        undefined = own.undefined()
    except (ElfError, OSError, struct.error, ValueError) as exc:
        warnings.append("%s: its symbols cannot be read (%s); its fit not checked" % (rel, exc))
        return None
    if len(undefined) > _MAX_UNDEFINED:
        warnings.append(
            "%s: more than %d undefined symbols; its symbols not checked" % (rel, _MAX_UNDEFINED)
        )
        undefined = []
    absent = set(m[0] for m in tree.missing)
    driver = any(m.startswith(_DRIVER_LIBS) for m in absent)
    for file, versions in needs:
        name = file.decode("utf-8", "replace")
        found = tree.by_name.get(name)
        lib = reader.get(found) if found is not None else None
        if lib is None or not lib.version_names:
            continue  # missing (said above), unreadable, or unversioned: glibc only warns
        defined = lib.defines()
        for _, wanted, weak in versions:
            if not weak and wanted not in defined:
                entry["versions"].append("%s (%s)" % (_shown(wanted), name))
    missing: List[bytes] = []
    for symbol, version, needed_from in undefined:
        if needed_from is not None and needed_from.decode("utf-8", "replace") in absent:
            continue  # its library is not found: said once, as that
        if driver and _driver_api(symbol):
            continue  # with no driver here its API cannot be looked for
        if not any(opened.exports(path, symbol, version) is not False for path in scope):
            missing.append(symbol + (b"@" + version if version else b""))
    missing.sort()
    entry["symbol_count"] = len(missing)
    entry["symbols"] = [_shown(m) for m in missing[:_MAX_LISTED]]
    return entry


def _driver_api(symbol: bytes) -> bool:
    """A symbol of the driver's APIs: cuInit, cuCtxGetCurrent, nvmlInit_v2."""
    return (symbol.startswith(b"cu") and symbol[2:3].isupper()) or symbol.startswith(b"nvml")


def _stamps(real: str, scope: List[str], seen: Dict[str, Optional[str]]) -> Optional[str]:
    """The stamps of ``real`` and its scope, joined; each file stamped once per probe
    (``seen``): libstdc++ and torch's libraries are in every extension's scope."""
    out = []
    for path in [real, *scope]:
        if path not in seen:
            seen[path] = file_stamp(path)
        stamp = seen[path]
        if stamp is None:
            return None
        out.append(stamp)
    return ";".join(out)


def _kept(
    reader: Reader, real: str, scope: List[str], tree: _Tree, seen: Dict[str, Optional[str]]
) -> Optional[Dict[str, Any]]:
    """The entry kept for ``real`` when neither it nor its scope changed."""
    if reader.cache is None:
        return None
    held = reader.cache.lib("FIT\0" + real, _stamps(real, scope, seen))
    if (
        held is None
        or held.get("scope") != scope
        or held.get("absent") != [list(m) for m in tree.missing]
    ):
        return None
    entry = held.get("entry")
    return dict(entry) if entry is not None and _plausible(entry) else None


def _keep(
    reader: Reader,
    real: str,
    scope: List[str],
    tree: _Tree,
    entry: Dict[str, Any],
    seen: Dict[str, Optional[str]],
) -> None:
    if reader.cache is not None:
        record = {"scope": scope, "absent": [list(m) for m in tree.missing], "entry": entry}
        reader.cache.keep_lib("FIT\0" + real, _stamps(real, scope, seen), record)


def _plausible(entry: Any) -> bool:
    """A kept entry has the shape _check() makes (the host validates its text as ever)."""
    if type(entry) is not dict or set(entry) != {"missing", "versions", "symbols", "symbol_count"}:
        return False
    lists = [entry["missing"], entry["versions"], entry["symbols"]]
    return type(entry["symbol_count"]) is int and all(
        type(v) is list and all(type(x) is str for x in v) for v in lists
    )
