"""The GPU stack's shared libraries as the bytes on disk say, not as the metadata says: each
library's SONAME, the version it carries inside, the distribution whose RECORD claims it,
and the copy the dynamic loader would give torch (ldso.py). Nothing is ever loaded.

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
import stat

from .elf import ElfError, read_elf, search_range
from .ldso import Loader, is_gpu, lib_name, listing, torch_loads
from .reading import (
    RECORD_CAP,
    UNSAFE_CHARS,
    WORD_CHARS,
    Regex,
    escaped_name,
    read_bytes,
    read_open,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Tuple

    from .distcache import DistCache

# A folder name under nvidia/ or triton's lib/ that is looked into.
# A folder name libraries are looked for in (without re: listed at every probe).
_DIR_CHARS = WORD_CHARS + ".-"


def dir_name(name: str) -> bool:
    """``name`` is 1 to 100 letters, digits, "_", "." and "-" (ASCII)."""
    return 0 < len(name) <= 100 and not name.strip(_DIR_CHARS)


_UNSAFE = Regex("[" + UNSAFE_CHARS + "]")
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


def stem(name: str) -> str:
    """``libnvrtc.alt.so.13`` -> ``libnvrtc``: the library a file is a build of."""
    return name.split(".so", 1)[0].split(".", 1)[0]


# ---- one file ----------------------------------------------------------------------------


def _read_file(path: str) -> Dict[str, Any]:
    """What ``path``'s bytes say: its dynamic section, the version string its stem carries
    (``string``) and why it could not be read (``error``)."""
    import re

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
    if not (
        all(t is None or (type(t) is str and len(t) <= 4096) for t in texts)
        and type(needed) is list
        and len(needed) <= 256
        and all(type(n) is str and len(n) <= 4096 for n in needed)
    ):
        return False
    text = "".join(t for t in texts if t) + "".join(needed)
    # Printable text holds no UNSAFE_CHARS (each is a control, format or line separator),
    # told without re: kept records are read at every probe.
    return text.isprintable() or not _UNSAFE.search(text)


class Reader:
    """Files read once per probe, through the distribution cache when there is one."""

    def __init__(self, cache: Optional[DistCache]) -> None:
        self.cache = cache
        self.seen: Dict[str, Dict[str, Any]] = {}
        self.folders: Dict[str, str] = {}  # folder -> its real path, for real()
        self.reals: Dict[str, str] = {}  # path -> os.path.realpath(path), for realpath()
        # cuDNN's graph library beside another of its libraries -> the version it says
        self.graphs: Dict[str, Optional[str]] = {}

    def real(self, path: str) -> str:
        """``os.path.realpath(path)``, each folder resolved once per probe (realpath costs an
        lstat per part of the path; the library and fit scans ask for the same few folders
        hundreds of times): a path that is not a link is its real folder and its name."""
        folder, name = os.path.split(path)
        if name in ("", ".", "..") or not folder:
            return os.path.realpath(path)
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return os.path.realpath(path)
        except OSError:
            return os.path.realpath(path)
        real = self.folders.get(folder)
        if real is None:
            real = self.folders[folder] = os.path.realpath(folder)
        return os.path.join(real, name)

    def realpath(self, path: str) -> str:
        """``os.path.realpath(path)``, once per probe (it costs an lstat per part of the
        path, and the scans ask for the same few paths again: torch's preloads, each
        cuDNN library's graph library)."""
        real = self.reals.get(path)
        if real is None:
            real = self.reals[path] = os.path.realpath(path)
        return real

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
            if graph not in self.graphs:
                real = None
                if os.path.isfile(graph) and not os.path.islink(graph):
                    real = self.read(self.realpath(graph))["string"]
                self.graphs[graph] = real
            found = self.graphs[graph]
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


def candidates(site: str) -> List[str]:
    """The GPU libraries under ``site``, as paths relative to it."""
    out: List[str] = []
    for folder in listing(os.path.join(site, "nvidia")):
        if dir_name(folder):
            lib = "nvidia/%s/lib" % folder
            out += [lib + "/" + n for n in listing(os.path.join(site, lib)) if lib_name(n)]
    torch_lib = os.path.join(site, "torch", "lib")
    out += ["torch/lib/" + n for n in listing(torch_lib) if n.startswith("libc10_cuda")]
    triton = "triton/backends/nvidia/lib"
    for name in listing(os.path.join(site, triton)):
        if lib_name(name):
            out.append(triton + "/" + name)
        elif dir_name(name):
            sub = triton + "/" + name
            out += [sub + "/" + n for n in listing(os.path.join(site, sub)) if lib_name(n)]
    return [p for p in out if lib_name(p.rsplit("/", 1)[1])]


def _claims(
    packages: List[Dict[str, Any]], wanted: Dict[str, List[str]], reader: Reader
) -> Dict[Tuple[str, str], List[Dict[str, Any]]]:
    """(site, relative path) -> the distributions whose RECORD lists it. Only the RECORDs of
    distributions that ship GPU libraries are read, each at most once (kept by its stamp)."""

    out: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
    for dist in packages:
        name, site = dist["name"], dist["location"]
        paths = wanted.get(site)
        if not paths or not (
            name.startswith("nvidia-") or name in ("torch", "triton", "pytorch-triton")
        ):
            continue
        record = os.path.join(site, dist["metadata_dir"], "RECORD")
        for row in kept_rows(reader, record, "RECORD", _gpu_lib):
            if row in paths:
                out.setdefault((site, row), []).append(dist)
    return out


def _gpu_lib(path: str) -> bool:
    """A RECORD row that names a GPU library file (a quoted row is no library of ours)."""
    return ".so" in path and bool(lib_name(path.rsplit("/", 1)[-1]))


def kept_rows(reader: Reader, record: str, kind: str, choose: Callable[[str], bool]) -> List[str]:
    """The paths RECORD lists that ``choose`` keeps, kept in the cache under ``kind`` and
    RECORD's stamp: an unchanged RECORD is not read again."""
    from .distcache import file_stamp

    key = kind + "\0" + record
    stamp = file_stamp(record)
    held = reader.cache.lib(key, stamp) if reader.cache is not None else None
    rows = held.get("rows") if held is not None else None
    if type(rows) is list and all(type(r) is str for r in rows):
        return rows
    try:
        text = read_bytes(record, RECORD_CAP).decode("utf-8", "replace")
    except OSError:
        return []
    rows = [path for path in (line.split(",", 1)[0] for line in text.splitlines()) if choose(path)]
    if reader.cache is not None:
        reader.cache.keep_lib(key, stamp, {"rows": rows})
    return rows


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


def where(path: str, sites: List[str]) -> str:
    """``path`` relative to the site folder holding it, else as it is (``sites`` with their
    real paths too, as _bases() gives them: the loader's picks are real paths)."""
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
    loader: Optional[Loader] = None,
) -> List[Dict[str, Any]]:
    """One entry per GPU library file in ``sites``, and per library torch would load from
    elsewhere or the process ``pid`` has mapped; see the module docstring. ``loader``: one
    shared with fit() (its reader too), which follows torch's import once for both."""
    if loader is None:
        loader = Loader(Reader(cache), environ, warnings)
    reader = loader.reader
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
        cuda = torch.get("cuda") if torch else None
        picks = torch_loads(torch_dist["location"], sites, cuda, loader)
    entries = []
    real_paths = set()
    bases = _bases(sites, reader)
    for site, rel in found:
        entry = _entry(site, rel, claims.get((site, rel), []), reader, picks, bases, warnings)
        if entry is not None:
            entries.append(entry)
            real_paths.add(reader.real(os.path.join(site, rel)))
    for soname, (path, why) in sorted(picks.items()):
        if path not in real_paths and not any(e["soname"] == soname for e in entries):
            version, source = reader.version(path)
            entry = _blank(soname, path)
            entry.update(soname=soname, embedded_version=version, version_source=source)
            entry.update(loader_pick=path, loader_pick_why=why, loader_pick_version=version)
            entries.append(entry)
    if pid is not None:
        _add_mapped(entries, mapped(pid, reader, warnings), reader, bases)
    # The loader's picks may lie in a folder named anything: one line each, escaped.
    for entry in entries:
        for key in ("path", "loader_pick", "mapped"):
            if entry[key] is not None:
                entry[key] = escaped_name(entry[key])
    return sorted(entries, key=lambda e: e["path"])


def _bases(sites: List[str], reader: Reader) -> List[str]:
    """``sites``, then the real path of each that is reached through a link (a venv whose
    own path, or a folder above it, is a symlink): the loader's picks and a process's maps
    are real paths, and one in the venv is the wheel's own file, not one from elsewhere."""
    bases = list(sites)
    for site in sites:
        real = reader.real(site.rstrip("/"))
        if real not in bases:
            bases.append(real)
    return bases


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
        if not (lib_name(name) and is_gpu(name)) or _UNSAFE.search(path):
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
            entry["mapped"] = where(path, sites)
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
    real = reader.real(full)
    inside = (site.rstrip("/") + "/", reader.real(site.rstrip("/")) + "/")
    if stat.S_ISLNK(mode) and not real.startswith(inside):
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
        entry["loader_pick"], entry["loader_pick_why"] = where(pick[0], sites), pick[1]
        entry["loader_pick_version"] = reader.version(pick[0])[0]
    return entry
