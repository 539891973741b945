"""The GPU stack's shared libraries as the bytes on disk say, not as the metadata says: each
library's SONAME, the version it carries inside, the distribution whose RECORD claims it,
and the copy the dynamic loader would give torch. Nothing is ever loaded.

Only the GPU stack is looked at (``nvidia/*/lib``, torch's ``libc10_cuda``, triton's bundled
libraries), and only where a version is known to be written is a file searched for it:

- NCCL: ``NCCL version 2.30.7+cuda13.3`` in .rodata (its ``ncclGetVersion`` prints it);
- cuDNN: ``cudnn_version_9_24_0_43_`` in libcudnn_graph's .rodata (libcudnn.so.9 itself
  is a small dispatcher that holds no version: it is given its libcudnn_graph's);
- NVRTC: ``Cuda compilation tools, release 13.0, V13.0.88`` in .rodata;
- cuBLAS, cudart and the rest carry none: a system copy's file name (libcudart.so.13.0.96)
  says it, else the SONAME's number is the major version.

What a file says is kept in the distribution cache (distcache.py) under the file's stat
stamp: an unchanged venv reads no library again. Files are opened with ``open_regular`` (a
FIFO or a device is refused) and read by bounded, positioned reads (elf.py); a link out of
site-packages is not followed. A library that cannot be read is a warning naming the
distribution that claims it, and its entry says why.
"""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import os
import re
import stat
import struct

from .elf import ElfError, read_elf, search_range
from .reading import RECORD_CAP, UNSAFE_CHARS, read_bytes, read_open

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

    from .distcache import DistCache

# A library's name as NVIDIA's and torch's wheels spell them; anything else is not looked at.
_LIB_NAME = re.compile(r"\Alib[A-Za-z0-9_+-]+(?:\.[A-Za-z0-9_]+)*\.so(?:\.[0-9]+)*\Z")
_DIR_NAME = re.compile(r"\A[A-Za-z0-9_.-]{1,100}\Z")
_UNSAFE = re.compile("[" + UNSAFE_CHARS + "]")
_MAX_LIBS = 512
_SEARCH_CAP = 64 << 20  # of one .rodata section: NCCL's is 0.5 MB, cuDNN graph's 22 MB
# The stem (name before ".so", less a ".alt" variant) -> the version string it carries.
# (Compiled when a file is searched: a warm probe compiles none.)
_STRINGS = {
    "libnccl": rb"NCCL version (\d{1,4}\.\d{1,4}\.\d{1,4}(?:\+cuda\d{1,3}(?:\.\d{1,3})?)?)",
    "libcudnn_graph": rb"cudnn_version_(\d{1,4})_(\d{1,4})_(\d{1,4})_(\d{1,4})_",
    "libnvrtc": rb"Cuda compilation tools, release \d{1,3}\.\d{1,3}, V(\d{1,3}\.\d{1,3}\.\d{1,5})",
}
# Stems whose SONAME number is their distribution's major version (not libcufile.so.0 of
# nvidia-cufile 1.15, nor libnvToolsExt.so.1 of nvidia-nvtx 13).
_SONAME_MAJOR = frozenset(
    (
        "libcudart",
        "libcublas",
        "libcublasLt",
        "libnvblas",
        "libcufft",
        "libcufftw",
        "libcurand",
        "libcusparse",
        "libcusolver",
        "libcusolverMg",
        "libcupti",
        "libnvJitLink",
        "libnvrtc",
        "libnvrtc-builtins",
        "libnccl",
        "libnvshmem_host",
    )
)
# The libraries torch loads that the loader model follows (by stem prefix).
_GPU_STEMS = (
    "libcudart",
    "libcublas",
    "libcudnn",
    "libnccl",
    "libnvrtc",
    "libcufft",
    "libcurand",
    "libcusparse",
    "libcusolver",
    "libcupti",
    "libnvJitLink",
    "libnvshmem",
    "libcufile",
    "libnvToolsExt",
)
# torch/__init__.py's _preload_cuda_deps list as of torch 2.14, for a torch whose own list
# cannot be read: (folder under nvidia/, file name pattern).
_TORCH_PRELOADS = (
    ("cublas", "libcublasLt.so.*[0-9]"),
    ("cublas", "libcublas.so.*[0-9]"),
    ("cudnn", "libcudnn.so.*[0-9]"),
    ("cuda_nvrtc", "libnvrtc.so.*[0-9]"),
    ("cuda_nvrtc", "libnvrtc-builtins.so.*[0-9]"),
    ("cuda_runtime", "libcudart.so.*[0-9]"),
    ("cuda_cupti", "libcupti.so.*[0-9]"),
    ("cufft", "libcufft.so.*[0-9]"),
    ("curand", "libcurand.so.*[0-9]"),
    ("nvjitlink", "libnvJitLink.so.*[0-9]"),
    ("cusparse", "libcusparse.so.*[0-9]"),
    ("cusparselt", "libcusparseLt.so.*[0-9]"),
    ("cusolver", "libcusolver.so.*[0-9]"),
    ("nccl", "libnccl.so.*[0-9]"),
    ("nvshmem", "libnvshmem_host.so.*[0-9]"),
    ("cufile", "libcufile.so.*[0-9]"),
)
_PRELOAD_ENTRY = r'\(\s*"(\w{1,40})"\s*,\s*"(lib[\w.*\[\]-]{1,60})"\s*\)'
_TORCH_INIT_CAP = 4 << 20
_LD_CACHE = "/etc/ld.so.cache"
_LD_CACHE_CAP = 16 << 20


def stem(name: str) -> str:
    """``libnvrtc.alt.so.13`` -> ``libnvrtc``: the library a file is a build of."""
    return name.split(".so", 1)[0].split(".", 1)[0]


# ---- one file ----------------------------------------------------------------------------


def _read_file(path: str) -> Dict[str, Any]:
    """What ``path``'s bytes say: its dynamic section, the version string its stem carries
    (``string``) and why it could not be read (``error``)."""
    record: Dict[str, Any] = {
        "soname": None,
        "needed": [],
        "rpath": None,
        "runpath": None,
        "machine": None,
        "string": None,
        "error": None,
    }
    try:
        elf = read_elf(path)
        pattern = _STRINGS.get(stem(os.path.basename(path)))
        found = None
        if pattern is not None and elf["rodata"] is not None:
            found = search_range(path, elf["rodata"], re.compile(pattern), _SEARCH_CAP)
    except ElfError as exc:
        record["error"] = "not a readable ELF library (%s)" % exc
        return record
    except OSError as exc:
        record["error"] = "unreadable (%s)" % (exc.strerror or exc)
        return record
    for key in ("soname", "needed", "rpath", "runpath", "machine"):
        record[key] = elf[key]
    if found is not None:
        record["string"] = ".".join(g.decode("ascii") for g in found.groups())
    return record


def plausible_lib(record: Any) -> bool:
    """A kept record holds what _read_file() could have written (else it is read again)."""
    texts = [record.get(k) for k in ("soname", "rpath", "runpath", "machine", "string", "error")]
    needed = record.get("needed")
    return (
        all(t is None or (type(t) is str and len(t) <= 4096) for t in texts)
        and type(needed) is list
        and len(needed) <= 256
        and all(type(n) is str and len(n) <= 4096 for n in needed)
        and not _UNSAFE.search("".join(t for t in texts if t) + "".join(needed))
    )


class Reader:
    """Files read once per probe, through the distribution cache when there is one."""

    def __init__(self, cache: Optional[DistCache]) -> None:
        self.cache = cache
        self.seen: Dict[str, Dict[str, Any]] = {}

    def read(self, path: str) -> Dict[str, Any]:
        """What the regular file ``path`` (a real path: no link left in it) says."""
        held = self.seen.get(path)
        if held is not None:
            return held
        from .distcache import file_stamp

        stamp = file_stamp(path)
        record = self.cache.lib(path, stamp) if self.cache is not None else None
        if record is None or not plausible_lib(record):
            record = _read_file(path)
            if self.cache is not None:
                self.cache.keep_lib(path, stamp, record)
        self.seen[path] = record
        return record

    def version(self, path: str) -> Tuple[Optional[str], Optional[str]]:
        """(version, where it was read: "string", "file name" or "soname") of the library at
        the real path ``path``."""
        record = self.read(path)
        if record["error"] is not None:
            return None, None
        if record["string"]:
            return record["string"], "string"
        name = os.path.basename(path)
        base = stem(name)
        if base.startswith("libcudnn") and base != "libcudnn_graph":
            graph = os.path.join(os.path.dirname(path), "libcudnn_graph" + name[len(base) :])
            if os.path.isfile(graph) and not os.path.islink(graph):
                found = self.read(os.path.realpath(graph))["string"]
                if found:
                    return found, "string"
        soname = record["soname"] or ""
        if soname and name.startswith(soname + "."):
            tail = name[len(soname) + 1 :]
            if _numbers(tail, 4):
                return soname.rsplit(".so.", 1)[-1] + "." + tail, "file name"
        if base in _SONAME_MAJOR or base.startswith("libcudnn"):
            number = soname.rsplit(".so.", 1)[1] if ".so." in soname else ""
            if _numbers(number, 2):
                return number, "soname"
        return None, None


def _numbers(text: str, most: int) -> bool:
    """``text`` is 1 to ``most`` dot-separated numbers of at most 5 digits."""
    parts = text.split(".")
    return len(parts) <= most and all(p.isdigit() and len(p) <= 5 for p in parts)


# ---- which files -------------------------------------------------------------------------


def _listdir(path: str) -> List[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def candidates(site: str) -> List[str]:
    """The GPU libraries under ``site``, as paths relative to it."""
    out: List[str] = []
    for folder in _listdir(os.path.join(site, "nvidia")):
        if _DIR_NAME.match(folder):
            lib = "nvidia/%s/lib" % folder
            out += [lib + "/" + n for n in _listdir(os.path.join(site, lib)) if _LIB_NAME.match(n)]
    torch_lib = os.path.join(site, "torch", "lib")
    out += ["torch/lib/" + n for n in _listdir(torch_lib) if n.startswith("libc10_cuda")]
    triton = "triton/backends/nvidia/lib"
    for name in _listdir(os.path.join(site, triton)):
        if _LIB_NAME.match(name):
            out.append(triton + "/" + name)
        elif _DIR_NAME.match(name):
            sub = triton + "/" + name
            out += [sub + "/" + n for n in _listdir(os.path.join(site, sub)) if _LIB_NAME.match(n)]
    return [p for p in out if _LIB_NAME.match(p.rsplit("/", 1)[1])]


def _claims(
    packages: List[Dict[str, Any]], wanted: Dict[str, List[str]], reader: Reader
) -> Dict[Tuple[str, str], List[Dict[str, Any]]]:
    """(site, relative path) -> the distributions whose RECORD lists it. Only the RECORDs of
    distributions that ship GPU libraries are read, each at most once (kept by its stamp)."""
    from .distcache import file_stamp

    out: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
    for dist in packages:
        name, site = dist["name"], dist["location"]
        paths = wanted.get(site)
        if not paths or not (
            name.startswith("nvidia-") or name in ("torch", "triton", "pytorch-triton")
        ):
            continue
        record = os.path.join(site, dist["metadata_dir"], "RECORD")
        key = "RECORD\0" + record
        stamp = file_stamp(record)
        held = reader.cache.lib(key, stamp) if reader.cache is not None else None
        rows = held.get("rows") if held is not None else None
        if type(rows) is not list or not all(type(r) is str for r in rows):
            rows = _record_libs(record)
            if reader.cache is not None:
                reader.cache.keep_lib(key, stamp, {"rows": rows})
        for row in rows:
            if row in paths:
                out.setdefault((site, row), []).append(dist)
    return out


def _record_libs(record: str) -> List[str]:
    """The library paths RECORD lists (a quoted row is no library of ours)."""
    try:
        text = read_bytes(record, RECORD_CAP).decode("utf-8", "replace")
    except OSError:
        return []
    rows = []
    for line in text.splitlines():
        path = line.split(",", 1)[0]
        if ".so" in path and _LIB_NAME.match(path.rsplit("/", 1)[-1]):
            rows.append(path)
    return rows


# ---- the loader ----------------------------------------------------------------------------


class LdCache:
    """/etc/ld.so.cache (the "glibc-ld.so.cache1.1" format, behind the old one where both
    are written), read whole (it is small) and looked up by name: the entries are unpacked
    at C speed, a name's strings decoded only when asked for. Empty when absent or
    damaged."""

    def __init__(self, path: str = _LD_CACHE) -> None:
        self.data = b""
        self.start = 0
        self.entries: List[Tuple[int, int]] = []
        try:
            data = read_bytes(path, _LD_CACHE_CAP)
        except OSError:
            return
        new = b"glibc-ld.so.cache1.1"
        start = 0
        if data.startswith(b"ld.so-1.7.0") and len(data) >= 16:
            old = struct.unpack_from("<I", data, 12)[0]
            start = (16 + old * 12 + 7) & ~7
        if data[start : start + len(new)] != new or len(data) < start + 48:
            return
        # Little- or big-endian as the machine that wrote it: the count that fits the file.
        for end in ("<", ">"):
            count = struct.unpack_from(end + "I", data, start + 20)[0]
            if start + 48 + count * 24 <= len(data):
                break
        else:
            return
        table = data[start + 48 : start + 48 + count * 24]
        self.entries = [(k, v) for _, k, v, _, _ in struct.iter_unpack(end + "iIIIQ", table)]
        self.data, self.start = data, start

    def get(self, name: str) -> List[str]:
        """The paths the cache gives for ``name``, in its order."""
        # Every place the name's bytes end a string: ldconfig shares string tails, so a
        # key may point into the middle of a path ("/lib/libc.so.6" holds "libc.so.6").
        needle = name.encode("utf-8", "replace") + b"\0"
        keys = set()
        at = self.data.find(needle)
        while at >= 0:
            keys.add(at - self.start)
            at = self.data.find(needle, at + 1)
        out = []
        for key, value in self.entries:
            if key in keys:
                where = _cstring(self.data, self.start + value)
                if where is not None:
                    out.append(where)
        return out


def _cstring(data: bytes, offset: int) -> Optional[str]:
    end = data.find(b"\0", offset, offset + 4096)
    if offset >= len(data) or end < 0:
        return None
    text = data[offset:end].decode("utf-8", "replace")
    return None if _UNSAFE.search(text) else text


class Loader:
    """glibc's search for a library name (ld.so(8)), over the files as they are: a name
    already loaded is that object; else DT_RPATH of the object that asks (only when it has
    no DT_RUNPATH), LD_LIBRARY_PATH, its DT_RUNPATH, /etc/ld.so.cache, the default folders.
    A file of another ELF class or machine is passed over, as the loader passes it."""

    def __init__(self, reader: Reader, environ: Dict[str, str], warnings: List[str]) -> None:
        import sysconfig

        self.reader = reader
        self.warnings = warnings
        self.loaded: Dict[str, Tuple[str, str]] = {}
        value = environ.get("LD_LIBRARY_PATH", "")
        self.ld_path = [d for d in value.replace(";", ":").split(":") if d.startswith("/")]
        self._cache: Optional[LdCache] = None
        arch = sysconfig.get_config_var("MULTIARCH")
        self.defaults = ["/lib/%s" % arch, "/usr/lib/%s" % arch] if arch else []
        self.defaults += ["/lib64", "/usr/lib64", "/lib", "/usr/lib"]

    def _fits(self, path: str, machine: str, why: str) -> Optional[str]:
        """The real path of ``path`` when it is a library of ``machine``."""
        if not os.path.lexists(path):
            return None
        real = os.path.realpath(path)
        if _UNSAFE.search(real):  # not a path a report may carry (nor a person be shown)
            self.warnings.append("a library path with control characters (%s); passed over" % why)
            return None
        record = self.reader.read(real)
        if record["error"] is not None:
            self.warnings.append("%s (%s): %s; passed over" % (path, why, record["error"]))
            return None
        return real if record["machine"] == machine else None

    def find(self, name: str, by: str) -> Optional[Tuple[str, str]]:
        """(real path, why) of the library ``name`` that the object ``by`` would load."""
        if name in self.loaded:
            return self.loaded[name]
        asker = self.reader.read(by)
        origin = os.path.dirname(by)
        tried: List[Tuple[str, str]] = []
        if asker["rpath"] and not asker["runpath"]:
            tried += [(d, "RPATH") for d in _expand(asker["rpath"], origin)]
        tried += [(d, "LD_LIBRARY_PATH") for d in self.ld_path]
        if asker["runpath"]:
            tried += [(d, "RUNPATH") for d in _expand(asker["runpath"], origin)]
        for folder, why in tried:
            real = self._fits(os.path.join(folder, name), asker["machine"], why)
            if real is not None:
                return real, why
        if self._cache is None:
            self._cache = LdCache()
        for path in self._cache.get(name):
            real = self._fits(path, asker["machine"], "ld.so.cache")
            if real is not None:
                return real, "ld.so.cache"
        for folder in self.defaults:
            real = self._fits(os.path.join(folder, name), asker["machine"], "default path")
            if real is not None:
                return real, "default path"
        return None

    def load(self, name: str, by: str) -> None:
        """``by`` asks for ``name``: the object found is loaded under that name."""
        if name not in self.loaded:
            found = self.find(name, by)
            if found is not None:
                self.loaded[name] = found

    def preload(self, path: str) -> None:
        """A dlopen by path (torch's preload): loaded under its SONAME unless one of that
        name is loaded already (then it is a second copy no lookup by name returns)."""
        soname = self.reader.read(path)["soname"]
        if soname and soname not in self.loaded:
            self.loaded[soname] = (path, "torch preload")


def _expand(value: str, origin: str) -> List[str]:
    """A DT_RPATH/DT_RUNPATH list with $ORIGIN expanded; relative and other $ entries left
    out (they depend on the working folder or the platform)."""
    out = []
    for entry in value.split(":"):
        entry = entry.replace("${ORIGIN}", "$ORIGIN").replace("$ORIGIN", origin)
        if entry.startswith("/") and "$" not in entry:
            out.append(os.path.normpath(entry))
    return out


def _gpu(name: str) -> bool:
    return name.startswith(_GPU_STEMS)


def _torch_preloads(torch_dir: str, reader: Reader) -> Tuple[bool, List[Tuple[str, str]]]:
    """(whether torch preloads the CUDA wheels' libraries whenever libcudart loaded, its
    list of them) from torch/__init__.py (kept in the cache under its stamp). torch 2.14
    preloads them eagerly, so that they win libtorch's lookups; older versions only when
    libtorch_global_deps failed to load."""
    from .distcache import file_stamp

    path = os.path.join(torch_dir, "__init__.py")
    stamp = file_stamp(path)
    held = reader.cache.lib("torch\0" + path, stamp) if reader.cache is not None else None
    if held is not None and type(held.get("eager")) is bool and _pairs(held.get("preloads")):
        return held["eager"], [(f, p) for f, p in held["preloads"]] or list(_TORCH_PRELOADS)
    try:
        text = read_bytes(path, _TORCH_INIT_CAP).decode("utf-8", "replace")
    except OSError:
        return False, list(_TORCH_PRELOADS)
    start = text.find("def _preload_cuda_deps")
    listed = re.findall(_PRELOAD_ENTRY, text[start : start + 8000]) if start >= 0 else []
    eager = "_preload_cuda_deps(required=False)" in text
    if reader.cache is not None:
        reader.cache.keep_lib("torch\0" + path, stamp, {"eager": eager, "preloads": listed})
    return eager, listed or list(_TORCH_PRELOADS)


def _pairs(value: Any) -> bool:
    return type(value) is list and all(
        type(v) is list and len(v) == 2 and all(type(x) is str for x in v) for v in value
    )


def _first_match(
    site: str, folders: List[str], pattern: str, listings: Dict[str, List[str]]
) -> Optional[str]:
    """The first file of ``nvidia/FOLDER/lib`` matching ``pattern`` (torch's glob; its
    "libX.so.*[0-9]" without fnmatch, which compiles a regular expression a pattern)."""
    for folder in folders:
        lib = os.path.join(site, "nvidia", folder, "lib")
        if lib not in listings:
            listings[lib] = _listdir(lib)
        for name in listings[lib]:
            if _glob(name, pattern):
                return os.path.join(lib, name)
    return None


def _glob(name: str, pattern: str) -> bool:
    if pattern.endswith("*[0-9]") and "*" not in pattern[:-6] and "[" not in pattern[:-6]:
        head = pattern[:-6]
        return name.startswith(head) and len(name) > len(head) and name[-1].isdigit()
    import fnmatch

    return fnmatch.fnmatchcase(name, pattern)


def torch_loads(
    torch_site: str, sites: List[str], cuda: Optional[str], loader: Loader
) -> Dict[str, Tuple[str, str]]:
    """SONAME -> (real path, why) of the GPU libraries torch would load, following its
    import: libtorch_global_deps is dlopened first (its DT_NEEDED found by the loader's
    rules); the wheels' libraries found on sys.path are preloaded by path (see
    _torch_preloads); then libtorch_cuda's DT_NEEDED are looked up, a name already loaded
    being that object; cuDNN's own sub-libraries are found from libcudnn's DT_RPATH."""
    torch_dir = os.path.join(torch_site, "torch")
    lib = os.path.join(torch_dir, "lib")
    deps = os.path.realpath(os.path.join(lib, "libtorch_global_deps.so"))
    main = next(
        (
            os.path.realpath(os.path.join(lib, n))
            for n in ("libtorch_cuda.so", "libtorch_cpu.so")
            if os.path.isfile(os.path.join(lib, n))
        ),
        None,
    )
    if not os.path.isfile(deps) or main is None:
        return {}
    eager, preloads = _torch_preloads(torch_dir, loader.reader)
    gd_needed = [n for n in loader.reader.read(deps)["needed"] if _gpu(n)]
    missing = [n for n in gd_needed if loader.find(n, deps) is None]
    folders_of = ["cu" + cuda.split(".")[0]] if cuda else []

    listings: Dict[str, List[str]] = {}

    def preload() -> None:
        for folder, pattern in preloads:
            for site in sites:
                found = _first_match(site, [folder, *folders_of], pattern, listings)
                if found is not None:
                    loader.preload(os.path.realpath(found))
                    break

    if missing:  # torch catches the OSError, preloads, then loads global deps again
        preload()
    for name in gd_needed:
        loader.load(name, deps)
    if not missing and eager and any(n.startswith("libcudart.so") for n in loader.loaded):
        preload()
    for name in loader.reader.read(main)["needed"]:
        if _gpu(name):
            loader.load(name, main)
    cudnn = next((v for k, v in loader.loaded.items() if k.startswith("libcudnn.so")), None)
    if cudnn is not None:
        folder = os.path.dirname(cudnn[0])
        for name in _listdir(folder):
            if name.startswith("libcudnn_") and _LIB_NAME.match(name):
                loader.load(name, cudnn[0])
    return dict(loader.loaded)


# ---- the report's entries ----------------------------------------------------------------


def _release(version: str) -> List[int]:
    """The leading numbers of a version ("2.30.7+cuda13.3" -> [2, 30, 7])."""
    out = []
    for part in version.split("+", 1)[0].split("."):
        digits = len(part) - len(part.lstrip("0123456789"))
        if not digits:
            break
        out.append(int(part[:digits]))
        if digits != len(part):
            break
    return out


def _agrees(embedded: str, metadata: str) -> bool:
    """The embedded version's numbers are the leading numbers of the metadata's."""
    ours = _release(embedded)
    return bool(ours) and _release(metadata)[: len(ours)] == ours


def _where(path: str, sites: List[str]) -> str:
    """``path`` relative to the site folder holding it, else as it is."""
    for site in sites:
        if path.startswith(site.rstrip("/") + "/"):
            return path[len(site.rstrip("/")) + 1 :]
    return path


def libraries(
    sites: List[str],
    packages: List[Dict[str, Any]],
    torch: Optional[Dict[str, Any]],
    environ: Dict[str, str],
    warnings: List[str],
    cache: Optional[DistCache] = None,
    pid: Optional[int] = None,
) -> List[Dict[str, Any]]:
    """One entry per GPU library file in ``sites``, and per library torch would load from
    elsewhere or the process ``pid`` has mapped; see the module docstring."""
    reader = Reader(cache)
    found: List[Tuple[str, str]] = []
    for site in sites:
        found += [(site, rel) for rel in candidates(site)]
    if len(found) > _MAX_LIBS:
        warnings.append(
            "%d GPU libraries in site-packages; the first %d read" % (len(found), _MAX_LIBS)
        )
        del found[_MAX_LIBS:]
    wanted: Dict[str, List[str]] = {}
    for site, rel in found:
        wanted.setdefault(site, []).append(rel)
    claims = _claims(packages, wanted, reader)
    torch_dist = next((p for p in packages if p["name"] == "torch" and not p["shadowed"]), None)
    picks: Dict[str, Tuple[str, str]] = {}
    if torch_dist is not None:
        loader = Loader(reader, environ, warnings)
        cuda = torch.get("cuda") if torch else None
        picks = torch_loads(torch_dist["location"], sites, cuda, loader)
    entries = []
    real_paths = set()
    for site, rel in found:
        entry = _entry(site, rel, claims.get((site, rel), []), reader, picks, sites, warnings)
        if entry is not None:
            entries.append(entry)
            real_paths.add(os.path.realpath(os.path.join(site, rel)))
    for soname, (path, why) in sorted(picks.items()):
        if path not in real_paths and not any(e["soname"] == soname for e in entries):
            version, source = reader.version(path)
            entry = _blank(soname, path)
            entry.update(soname=soname, embedded_version=version, version_source=source)
            entry.update(loader_pick=path, loader_pick_why=why, loader_pick_version=version)
            entries.append(entry)
    if pid is not None:
        _add_mapped(entries, mapped(pid, reader, warnings), reader, sites)
    return sorted(entries, key=lambda e: e["path"])


_MAPS_CAP = 16 << 20


def mapped(pid: int, reader: Reader, warnings: List[str]) -> Dict[str, str]:
    """SONAME (the file name, for a file deleted since) -> path of the GPU libraries the
    process ``pid`` has mapped, from /proc/PID/maps (read capped; the files themselves as
    any library is: regular, bounded)."""
    where = "/proc/%d/maps" % pid
    try:
        fd = os.open(where, os.O_RDONLY)
        try:
            text = read_open(fd, _MAPS_CAP, where).decode("utf-8", "replace")
        finally:
            os.close(fd)
    except OSError as exc:
        warnings.append("--pid %d: %s unreadable (%s)" % (pid, where, exc.strerror or exc))
        return {}
    out: Dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) < 6 or not fields[5].startswith("/"):
            continue
        path = fields[5]
        gone = path.endswith(" (deleted)")
        path = path[: -len(" (deleted)")] if gone else path
        name = os.path.basename(path)
        if not (_LIB_NAME.match(name) and _gpu(name)) or _UNSAFE.search(path):
            continue
        if gone:
            out.setdefault(name, path + " (deleted)")
            continue
        soname = reader.read(path)["soname"] or name
        out.setdefault(soname, path)
    return out


def _add_mapped(
    entries: List[Dict[str, Any]], found: Dict[str, str], reader: Reader, sites: List[str]
) -> None:
    """Each entry of a SONAME the process has mapped says where from; a mapped library no
    entry holds gets one of its own."""
    for soname, path in sorted(found.items()):
        known = [e for e in entries if (e["soname"] or e["name"]) == soname]
        for entry in known:
            entry["mapped"] = _where(path, sites)
        if not known:
            entry = _blank(soname, path)
            entry["soname"], entry["mapped"] = soname, path
            if not path.endswith(" (deleted)"):
                entry["embedded_version"], entry["version_source"] = reader.version(path)
            entries.append(entry)


def _blank(name: str, path: str) -> Dict[str, Any]:
    return {
        "name": name,
        "path": path,
        "dist": None,
        "metadata_version": None,
        "also_claimed_by": [],
        "soname": None,
        "embedded_version": None,
        "version_source": None,
        "loader_pick": None,
        "loader_pick_why": None,
        "loader_pick_version": None,
        "mapped": None,
        "error": None,
    }


def _entry(
    site: str,
    rel: str,
    claimants: List[Dict[str, Any]],
    reader: Reader,
    picks: Dict[str, Tuple[str, str]],
    sites: List[str],
    warnings: List[str],
) -> Optional[Dict[str, Any]]:
    full = os.path.join(site, rel)
    name = rel.rsplit("/", 1)[1]
    entry = _blank(name, rel)
    if claimants:
        owner = "%s %s: %s" % (claimants[0]["name"], claimants[0]["version"], rel)
    else:
        owner = "%s (in no distribution's RECORD)" % rel
    try:
        mode = os.lstat(full).st_mode
    except OSError:
        return None
    real = os.path.realpath(full)
    if stat.S_ISLNK(mode) and not real.startswith(site.rstrip("/") + "/"):
        entry["error"] = "a link out of site-packages; not followed"
    else:
        record = reader.read(real)
        entry["error"] = record["error"]
        entry["soname"] = record["soname"]
        if rel.startswith("triton/") and record["soname"] != name and not record["error"]:
            return None  # a copy of one under its SONAME (libcupti.so, libcupti.so.2025.1.1)
        entry["embedded_version"], entry["version_source"] = reader.version(real)
    if entry["error"]:
        warnings.append("%s: %s" % (owner, entry["error"]))
    embedded = entry["embedded_version"]
    # With two claimants (a clobbered file), the one whose metadata the bytes contradict.
    claimants = sorted(
        claimants,
        key=lambda d: (embedded is None or _agrees(embedded, d["version"]), d["name"]),
    )
    if claimants:
        entry["dist"], entry["metadata_version"] = claimants[0]["name"], claimants[0]["version"]
        entry["also_claimed_by"] = ["%s %s" % (d["name"], d["version"]) for d in claimants[1:]]
    pick = picks.get(entry["soname"] or "")
    if pick is not None:
        entry["loader_pick"], entry["loader_pick_why"] = _where(pick[0], sites), pick[1]
        entry["loader_pick_version"] = reader.version(pick[0])[0]
    return entry
