"""The dynamic loader's choice, modelled over the files as they are: which copy of a
library glibc's search (ld.so(8)) and torch's own import would give torch. Nothing is
loaded; each file is read as libs.Reader reads it (bounded, kept by its stamp).
"""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import os
import struct

from .reading import DIGITS, UNSAFE_CHARS, WORD_CHARS, Regex, read_bytes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

    from .libs import Reader

# A library's name as NVIDIA's and torch's wheels spell them; anything else is not looked at.
# (lib_name() tells it without re: a CUDA venv's libraries are listed at every probe.)
LIB_NAME = Regex(r"\Alib[A-Za-z0-9_+-]+(?:\.[A-Za-z0-9_]+)*\.so(?:\.[0-9]+)*\Z")


def lib_name(name: str) -> bool:
    """Whether LIB_NAME matches ``name``: "lib", a stem of word characters, "+" and "-",
    then dot-separated parts of word characters up to the last "so", and numbers after it
    (str.isdigit would take other scripts' digits; ``\\Z`` takes no line end)."""
    parts = name.split(".")
    if not parts[0].startswith("lib") or len(parts[0]) < 4 or parts[0][3:].strip(WORD_CHARS + "+-"):
        return False
    try:
        last = len(parts) - 1 - parts[::-1].index("so", 0, len(parts) - 1)
    except ValueError:
        return False
    return all(p and not p.strip(WORD_CHARS) for p in parts[1:last]) and all(
        p and not p.strip(DIGITS) for p in parts[last + 1 :]
    )


_UNSAFE = Regex("[" + UNSAFE_CHARS + "]")
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


def listing(path: str) -> List[str]:
    """The names in ``path``, sorted (none when it cannot be listed)."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


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
    # Printable text holds no UNSAFE_CHARS (told without re: ld.so.cache is read at every
    # probe that follows the loader).
    return text if text.isprintable() or not _UNSAFE.search(text) else None


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
        self._found: Dict[Tuple[Any, ...], Optional[Tuple[str, str]]] = {}
        # torch_loads()'s answer, and what it was asked: the libraries' scan and the fit
        # check both follow torch's import, with one loader (main.probe)
        self.torch: Optional[Tuple[Tuple[Any, ...], Dict[str, Tuple[str, str]]]] = None
        arch = sysconfig.get_config_var("MULTIARCH")
        self.defaults = ["/lib/%s" % arch, "/usr/lib/%s" % arch] if arch else []
        self.defaults += ["/lib64", "/usr/lib64", "/lib", "/usr/lib"]

    def _fits(self, path: str, machine: str, why: str) -> Optional[str]:
        """The real path of ``path`` when it is a library of ``machine``."""
        if not os.path.lexists(path):
            return None
        real = self.reader.real(path)
        # A folder named with U+202E (a venv's) is searched as the loader searches it: the
        # report carries such a path as its escape (libs.py, fit.py).
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
        # The search depends only on these: many extensions ask for libstdc++ alike.
        key = (name, asker["rpath"], asker["runpath"], origin, asker["machine"])
        if key not in self._found:
            self._found[key] = self._search(name, asker, origin)
        return self._found[key]

    def _search(self, name: str, asker: Dict[str, Any], origin: str) -> Optional[Tuple[str, str]]:
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


def is_gpu(name: str) -> bool:
    """``name`` is a library of the GPU stack torch loads (by its stem)."""
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
    import re  # once a torch is read afresh: not at every probe (8 ms of its CPU)

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
            listings[lib] = listing(lib)
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
    asked = (torch_site, tuple(sites), cuda)
    if loader.torch is not None and loader.torch[0] == asked:
        return dict(loader.torch[1])  # followed already: the loader holds what it loaded
    picks = _torch_loads(torch_site, sites, cuda, loader)
    loader.torch = (asked, dict(picks))
    return picks


def _torch_loads(
    torch_site: str, sites: List[str], cuda: Optional[str], loader: Loader
) -> Dict[str, Tuple[str, str]]:
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
    gd_needed = [n for n in loader.reader.read(deps)["needed"] if is_gpu(n)]
    missing = [n for n in gd_needed if loader.find(n, deps) is None]
    folders_of = ["cu" + cuda.split(".")[0]] if cuda else []

    listings: Dict[str, List[str]] = {}

    def preload() -> None:
        for folder, pattern in preloads:
            for site in sites:
                found = _first_match(site, [folder, *folders_of], pattern, listings)
                if found is not None:
                    loader.preload(loader.reader.realpath(found))
                    break

    if missing:  # torch catches the OSError, preloads, then loads global deps again
        preload()
    for name in gd_needed:
        loader.load(name, deps)
    if not missing and eager and any(n.startswith("libcudart.so") for n in loader.loaded):
        preload()
    for name in loader.reader.read(main)["needed"]:
        if is_gpu(name):
            loader.load(name, main)
    cudnn = next((v for k, v in loader.loaded.items() if k.startswith("libcudnn.so")), None)
    if cudnn is not None:
        folder = os.path.dirname(cudnn[0])
        for name in listing(folder):
            if name.startswith("libcudnn_") and lib_name(name):
                loader.load(name, cudnn[0])
    return dict(loader.loaded)
