"""The envguard probe: measures the interpreter it runs in and prints one JSON document.

This file is sent as source text to the *target* interpreter (``python -I -``, wrapped in a
version check by probe/runner.py and read from stdin), so it must stay standard-library only
and run on Python 3.8+.
It never imports any installed distribution (importing torch costs seconds and can
initialise CUDA). Its only input is one JSON argument; everything it reports is redacted
on this side of the pipe, so a secret never travels back to envguard.
"""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import sys
import sysconfig

# Start-up is most of the probe's cost: modules used on rare paths (csv, ast, subprocess,
# urllib, platform, typing) are imported where they are needed, not here.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

PROBE_VERSION = 1

# Variables that change how a training run behaves, by prefix or exact name.
ENV_PREFIXES = (
    "CUDA_",
    "CUDNN_",
    "CUBLAS_",
    "NCCL_",
    "NVIDIA_",
    "NVTE_",
    "TORCH",
    "PYTORCH_",
    "TRITON_",
    "OMP_",
    "MKL_",
    "KMP_",
    "OPENBLAS_",
    "HF_",
    "HUGGINGFACE_",
    "TRANSFORMERS_",
    "TOKENIZERS_",
    "WANDB_",
    "ACCELERATE_",
    "DEEPSPEED_",
    "XLA_",
    "GLOO_",
    "HIP_",
    "HSA_",
    "ROCM_",
    "SGLANG_",
    "VLLM_",
    "FLASHINFER_",
    "UV_",
    "PIP_",
)
ENV_NAMES = ("LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PYTHONHASHSEED", "VIRTUAL_ENV")
SECRET_WORDS = (
    "TOKEN",
    "KEY",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
    "PRIVATE",
    "COOKIE",
    "SESSION",
    "SIGNATURE",
)
REDACTED = "<redacted>"

# Greedy up to the last "@" of the authority: a password may itself contain "@".
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s?#]*)@")
_BARE_USERINFO = re.compile(r"(?<![\w/:@.-])[^\s:/@]+:[^\s/@]+@(?=[\w.\[-])")
# Query parameters that carry credentials (?token=..., S3's X-Amz-Signature=...).
_SECRET_QUERY = re.compile(
    r"(?P<key>[?&#][^=&#\s]*(?:token|key|secret|passw|signature|sig|credential|auth)"
    r"[^=&#\s]*=)[^&#\s]*",
    re.IGNORECASE,
)
# Files an installer writes itself: they differ between two installs of one wheel.
_INSTALLER_FILES = frozenset(
    ("INSTALLER", "REQUESTED", "RECORD", "direct_url.json", "uv_cache.json")
)


def canonical_name(name: str) -> str:
    """PEP 503 normalisation (repeated here: the probe may not import packaging)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def redact_url(url: str) -> str:
    """Remove credentials from every URL in ``url``; an ssh user name alone is kept."""

    def _strip(match: Any) -> str:
        scheme, userinfo = str(match.group("scheme")), str(match.group("userinfo"))
        if "ssh" in scheme.lower() and ":" not in userinfo:
            return str(match.group(0))
        return scheme

    url = _URL_USERINFO.sub(_strip, url)
    if "@" in url and ":" in url:  # a proxy written without a scheme: user:password@host
        url = _BARE_USERINFO.sub("", url)
    return _SECRET_QUERY.sub(lambda m: m.group("key") + REDACTED, url) if "=" in url else url


def redact_argv(argv: List[str]) -> List[str]:
    """A command line fit to record: URL credentials, NAME=secret and --secret VALUE hidden."""
    out: List[str] = []
    hide_next = False
    previous = ""
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            previous = arg
            continue
        # sshpass -p PASSWORD, an HTTP "Authorization: Bearer TOKEN" header
        if (previous.endswith("sshpass") and arg == "-p") or arg.strip("'\"").lower() in (
            "bearer",
            "basic",
            "token",
        ):
            out.append(arg)
            hide_next = True
            previous = arg
            continue
        previous = arg
        if " " in arg:  # a quoted command line inside one argument (--via, --then)
            out.append(" ".join(redact_argv(arg.split(" "))))
            continue
        name, sep, _value = arg.partition("=")
        bare = name.lstrip("-")
        if sep and bare and is_secret_name(bare.replace("-", "_")):
            out.append(name + "=" + REDACTED)
        elif arg.startswith("-") and not sep and is_secret_name(bare.replace("-", "_")):
            out.append(arg)
            hide_next = True
        else:
            out.append(redact_url(arg))
    return out


def secret_digest(name: str, value: str) -> str:
    """A short, name-salted hash so two redacted values can be compared, never recovered."""
    digest = hashlib.sha256((name + "\0" + value).encode("utf-8", "surrogateescape")).hexdigest()
    return REDACTED[:-1] + ":" + digest[:8] + ">"


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS)


def capture_env(environ: Dict[str, str]) -> Dict[str, str]:
    out = {}
    for name, value in environ.items():
        if not (name.startswith(ENV_PREFIXES) or name in ENV_NAMES):
            continue
        out[name] = secret_digest(name, value) if is_secret_name(name) else redact_url(value)
    return out


def _read_text(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def _read_bytes(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _metadata_headers(path: str) -> Dict[str, str]:
    """Name and Version from a METADATA/PKG-INFO header block, reading no further."""
    found: Dict[str, str] = {}
    with open(path, "rb") as fh:
        head = fh.read(8192)  # Name and Version open the header block
        if b"\nVersion:" not in head or (b"\nName:" not in head and not head.startswith(b"Name:")):
            head += fh.read()
    for raw in head.splitlines():
        if not raw.strip():
            break
        key, sep, value = raw.partition(b":")
        if sep and key in (b"Name", b"Version"):
            text = value.decode("utf-8", "replace").strip()
            found.setdefault(key.decode(), text)
            if len(found) == 2:
                break
    return found


def _record_row(line: str) -> Tuple[str, str]:
    """(path, hash) of one RECORD line; the csv module only for a quoted path."""
    if line[0] == '"':
        import csv

        row = next(csv.reader([line]), ["", ""])
        return (row[0], row[1]) if len(row) > 1 else ("", "")
    head, _, _size = line.rpartition(",")
    path, _, digest = head.rpartition(",")
    return path, digest


def record_fingerprint(record: bytes | str, dist_info: str) -> str:
    """sha256 over sorted (path, hash) RECORD rows that two installs of one wheel share.

    Left out: bytecode, files outside the package tree (console scripts carry the venv
    path in their shebang) and the files the installer writes itself. This loop is most
    of the probe's time (torch's RECORD has ~15k rows), so the common case stays cheap.
    """
    # One strict decode of the whole file is far cheaper than a decoding reader.
    record_text = record if isinstance(record, str) else record.decode("utf-8", "surrogateescape")
    installer_files = {dist_info + "/" + name for name in _INSTALLER_FILES}
    rows: List[str] = []
    append = rows.append
    for line in record_text.splitlines():
        if not line:
            continue
        path, digest = _record_row(line)
        if not digest:
            continue
        if "\\" in path or "./" in path or "//" in path or path.startswith("/"):
            path = posixpath.normpath(path.replace("\\", "/"))
            if path.startswith(("../", "/")) or path == "..":
                continue
        if path.endswith((".pyc", ".pyo")) or "__pycache__" in path or path in installer_files:
            continue
        append(path + "\0" + digest)
    rows.sort()
    return hashlib.sha256("\n".join(rows).encode("utf-8", "surrogateescape")).hexdigest()


def _redact_direct_url(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _redact_direct_url(v) for k, v in data.items()}
    if isinstance(data, str):
        return redact_url(data)
    return data


def _dist_from_dir_name(entry: str) -> Tuple[str, str]:
    stem = entry.rsplit(".", 1)[0]
    name, _, version = stem.partition("-")
    return name, version.split("-py")[0]


def read_distribution(site: str, entry: str, warnings: List[str]) -> Optional[Dict[str, Any]]:
    """One installed distribution from its .dist-info or .egg-info; None if unreadable."""
    path = os.path.join(site, entry)
    is_dist_info = entry.endswith(".dist-info")
    if is_dist_info:
        meta_path = os.path.join(path, "METADATA")
    elif os.path.isdir(path):
        meta_path = os.path.join(path, "PKG-INFO")
    else:
        meta_path = path
    dir_name, dir_version = _dist_from_dir_name(entry)
    try:
        headers = _metadata_headers(meta_path)
    except OSError as exc:
        headers = {}
        warnings.append("%s: metadata unreadable (%s)" % (path, exc.strerror or exc))
    display = headers.get("Name") or dir_name
    version = headers.get("Version") or dir_version
    if not display or not version:
        warnings.append("%s: broken metadata (no name or version); skipped" % path)
        return None
    dist: Dict[str, Any] = {
        "name": canonical_name(display),
        "display_name": display,
        "version": version,
        "location": site,
        "metadata_dir": entry,
        "installer": None,
        "requested": False,
        "direct_url": None,
        "fingerprint": None,
    }
    if not is_dist_info:
        return dist
    try:  # one listing instead of a failed open() per optional file
        present = set(os.listdir(path))
    except OSError:
        present = set()
    installer = _read_text(os.path.join(path, "INSTALLER")) if "INSTALLER" in present else None
    dist["installer"] = installer.strip() or None if installer is not None else None
    dist["requested"] = "REQUESTED" in present
    raw_url = None
    if "direct_url.json" in present:
        raw_url = _read_text(os.path.join(path, "direct_url.json"))
    if raw_url is not None:
        try:
            dist["direct_url"] = _redact_direct_url(json.loads(raw_url))
        except ValueError:
            warnings.append("%s: direct_url.json is not valid JSON; source unknown" % path)
    record = _read_bytes(os.path.join(path, "RECORD")) if "RECORD" in present else None
    if record is None:
        warnings.append("%s: no RECORD; content fingerprint unknown" % path)
    else:
        dist["fingerprint"] = record_fingerprint(record, entry)
    return dist


def site_dirs() -> List[str]:
    paths = sysconfig.get_paths()
    out: List[str] = []
    for key in ("purelib", "platlib"):
        path = paths.get(key)
        if path and path not in out:
            out.append(path)
    return out


def scan_packages(sites: List[str], warnings: List[str]) -> List[Dict[str, Any]]:
    """Every distribution in ``sites``; a name seen again later is kept but marked shadowed."""
    packages: List[Dict[str, Any]] = []
    seen: Dict[str, Dict[str, Any]] = {}
    for site in sites:
        try:
            entries = sorted(os.listdir(site))
        except OSError:
            continue
        for entry in entries:
            if not entry.endswith((".dist-info", ".egg-info")):
                continue
            dist = read_distribution(site, entry, warnings)
            if dist is None:
                continue
            first = seen.get(dist["name"])
            dist["shadowed"] = first is not None
            if first is None:
                seen[dist["name"]] = dist
            else:
                warnings.append(
                    "%s %s in %s is shadowed by %s %s in %s"
                    % (
                        dist["name"],
                        dist["version"],
                        site,
                        first["name"],
                        first["version"],
                        first["location"],
                    )
                )
            packages.append(dist)
    return packages


_ASSIGN = re.compile(r"^([A-Za-z_]\w*)[ \t]*(?::[^=\n]*)?=[ \t]*(.+?)[ \t]*$", re.M)
_TORCH_KEYS = ("__version__", "debug", "cuda", "git_version", "hip")


def _literal(text: str) -> Any:
    constants = {"None": None, "True": True, "False": False}
    if text in constants:
        return constants[text]
    quote = text[:1]
    simple = len(text) >= 2 and text[-1] == quote and quote not in text[1:-1]
    if quote in ("'", '"') and simple and "\\" not in text:
        return text[1:-1]
    import ast  # an unusual literal: let Python read it

    return ast.literal_eval(text)


def _literal_assignments(source: str) -> Dict[str, Any]:
    """Top-level ``name = literal`` (or ``name: T = literal``) lines torch's version.py has."""
    values: Dict[str, Any] = {}
    for name, raw in _ASSIGN.findall(source):
        if name in _TORCH_KEYS and name not in values:
            try:
                values[name] = _literal(raw)
            except Exception:  # an odd version.py must not stop the snapshot
                pass
    return values


def torch_build(packages: List[Dict[str, Any]], warnings: List[str]) -> Optional[Dict[str, Any]]:
    """torch's build facts from torch/version.py, parsed and never imported."""
    torch = next((p for p in packages if p["name"] == "torch" and not p["shadowed"]), None)
    if torch is None:
        return None
    path = os.path.join(torch["location"], "torch", "version.py")
    source = _read_text(path)
    values: Dict[str, Any] = {}
    if source is None:
        warnings.append("%s: missing; torch build details unknown" % path)
    else:
        values = _literal_assignments(source)
        if "__version__" not in values:
            warnings.append("%s: no __version__; torch build details unknown" % path)

    def text(key: str) -> Optional[str]:
        value = values.get(key)
        return None if value is None else str(value)

    debug = values.get("debug")
    return {
        "version": text("__version__") or torch["version"],
        "cuda": text("cuda"),
        "git_version": text("git_version"),
        "hip": text("hip"),
        "debug": debug if isinstance(debug, bool) else None,
    }


def _which(name: str) -> Optional[str]:
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(folder, name)
        if folder and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _start(argv: List[str]) -> Optional[Tuple[int, int]]:
    """Start a tool with stdout on a pipe (posix_spawn: no subprocess import); (pid, fd)."""
    exe = _which(argv[0])
    if exe is None or not hasattr(os, "posix_spawn"):
        return None
    read_fd, write_fd = os.pipe()
    try:
        pid = os.posix_spawn(
            exe,
            [exe, *argv[1:]],
            os.environ,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, write_fd, 1),
                (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
            ],
        )
    except OSError:
        os.close(read_fd)
        return None
    finally:
        os.close(write_fd)
    return pid, read_fd


def _finish(started: Optional[Tuple[int, int]], timeout: float = 15.0) -> Optional[str]:
    """The tool's stdout when it exits 0 within ``timeout``, else None."""
    if started is None:
        return None
    import select
    import time

    pid, fd = started
    chunks: List[bytes] = []
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                os.kill(pid, 9)
                break
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                data = os.read(fd, 65536)
                if not data:
                    break
                chunks.append(data)
    finally:
        os.close(fd)
    while True:  # stdout is closed; the tool may still hang: wait no longer than the deadline
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            timed_out = True
            os.kill(pid, 9)
            _, status = os.waitpid(pid, 0)
            break
        time.sleep(0.005)
    if timed_out or not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        return None
    return b"".join(chunks).decode("utf-8", "replace")


def accelerator(smi: Optional[str], nvcc: Optional[str]) -> Dict[str, Any]:
    gpus: List[str] = []
    driver = None
    source = None
    if smi:
        for line in smi.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 2 and parts[0]:
                gpus.append(parts[0])
                driver = driver or parts[1]
        source = "nvidia-smi" if gpus else None
    if driver is None:
        text = _read_text("/proc/driver/nvidia/version")
        match = re.search(r"Kernel Module(?: for [\w]+)?\s+([0-9][0-9.]+)", text or "")
        if match:
            driver, source = match.group(1), "/proc/driver/nvidia/version"
    nvcc_version = None
    if nvcc:
        match = re.search(r"release [0-9.]+, V([0-9.]+)", nvcc)
        nvcc_version = match.group(1) if match else None
    return {
        "present": bool(gpus) or driver is not None,
        "driver": driver,
        "gpus": gpus,
        "count": len(gpus),
        "nvcc": nvcc_version,
        "source": source,
    }


def walk_tree(root: str) -> Dict[str, Any]:
    """Size, file count and newest mtime of a directory tree, never following symlinks."""
    result: Dict[str, Any] = {
        "path": root,
        "exists": False,
        "readable": True,
        "bytes": 0,
        "files": 0,
        "newest_mtime": None,
        "unreadable_dirs": 0,
    }
    # The root itself may be a symlink to scratch space: one hop cannot loop.
    start = os.path.realpath(root)
    if not os.path.isdir(start):
        result["exists"] = os.path.lexists(root)
        return result
    result["exists"] = True
    total = count = 0
    newest = 0.0
    unreadable = 0
    stack = [start]
    while stack:
        current = stack.pop()
        try:
            scanner = os.scandir(current)
        except OSError:
            unreadable += 1
            if current == start:
                result["readable"] = False
            continue
        with scanner:
            for entry in scanner:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        total += st.st_size
                        count += 1
                        if st.st_mtime > newest:
                            newest = st.st_mtime
                except OSError:
                    unreadable += 1
    result.update(bytes=total, files=count, newest_mtime=newest or None, unreadable_dirs=unreadable)
    return result


def default_caches(environ: Dict[str, str]) -> List[Tuple[str, str]]:
    user = _user()
    inductor = environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(
        "/tmp", "torchinductor_" + user
    )
    triton = environ.get("TRITON_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".triton", "cache"
    )
    return [("inductor", inductor), ("triton", triton)]


def hash_file(path: str) -> Dict[str, Any]:
    path = os.path.abspath(os.path.expanduser(path))
    digest = hashlib.sha256()
    size = 0
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
                size += len(block)
    except OSError as exc:
        return {"path": path, "sha256": None, "size": None, "error": exc.strerror or str(exc)}
    return {"path": path, "sha256": digest.hexdigest(), "size": size, "error": None}


def _git(path: str, *args: str) -> Optional[str]:
    import subprocess

    try:
        proc = subprocess.run(
            ["git", "-C", path, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout.decode("utf-8", "surrogateescape")


def git_top(path: str) -> Optional[str]:
    out = _git(path, "rev-parse", "--show-toplevel")
    return out.strip() if out else None


def git_repo(path: str) -> Dict[str, Any]:
    """A repo record through the `git` command (used where envguard's gitpython is not)."""
    top = git_top(path)
    if top is None:
        error = "no such directory" if not os.path.isdir(path) else "not a git work tree"
        return {"path": path, "error": error}
    head = (_git(top, "rev-parse", "--verify", "-q", "HEAD") or "").strip() or None
    branch = (_git(top, "symbolic-ref", "--short", "-q", "HEAD") or "").strip() or None
    diff = _git(top, "diff", "HEAD", "--no-color", "--no-ext-diff", "--binary") or ""
    diff = diff.rstrip("\n") if head else ""
    dirty = bool(diff) or bool((_git(top, "status", "--porcelain", "-uno") or "").strip())
    untracked = _git(top, "ls-files", "--others", "--exclude-standard", "-z") or ""
    remotes = (_git(top, "remote") or "").split()
    remote = None
    if remotes:
        name = "origin" if "origin" in remotes else remotes[0]
        url = (_git(top, "remote", "get-url", name) or "").strip()
        remote = redact_url(url) if url else None
    return {
        "path": top,
        "head": head,
        "branch": branch,
        "dirty": dirty,
        "diff_sha256": hashlib.sha256(diff.encode("utf-8", "surrogateescape")).hexdigest()
        if dirty
        else None,
        "untracked": len([p for p in untracked.split("\0") if p]),
        "remote": remote,
        "error": None,
    }


def probe_repos(args: Dict[str, Any], packages: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    paths = [os.path.abspath(os.path.expanduser(p)) for p in args.get("repos", [])]
    if args.get("editable_repos"):
        for pkg in packages:
            url = (pkg.get("direct_url") or {}).get("url", "")
            editable = ((pkg.get("direct_url") or {}).get("dir_info") or {}).get("editable")
            if editable and url.startswith("file://"):
                from urllib.parse import unquote, urlsplit

                top = git_top(unquote(urlsplit(url).path))
                if top:
                    paths.append(top)
    seen, out = set(), []
    for path in paths:
        record = git_repo(path)
        if record["path"] not in seen:
            seen.add(record["path"])
            out.append(record)
    return out


def _user() -> str:
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):  # what getpass.getuser() reads
        if os.environ.get(name):
            return os.environ[name]
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):  # no passwd entry inside some containers
        return str(os.getuid()) if hasattr(os, "getuid") else "unknown"


def _full_version(info: Any) -> str:
    version = "%d.%d.%d" % (info.major, info.minor, info.micro)
    if info.releaselevel != "final":
        version += info.releaselevel[0] + str(info.serial)
    return version


def _python_version() -> str:
    return "%d.%d.%d" % sys.version_info[:3] + (
        ""
        if sys.version_info.releaselevel == "final"
        else sys.version_info.releaselevel[0] + str(sys.version_info.serial)
    )


def marker_environment() -> Dict[str, str]:
    """PEP 508 marker values of this interpreter (as packaging.markers computes them)."""
    uname = os.uname()
    return {
        "implementation_name": sys.implementation.name,
        "implementation_version": _full_version(sys.implementation.version),
        "os_name": os.name,
        "platform_machine": uname.machine,
        "platform_release": uname.release,
        "platform_system": uname.sysname,
        "platform_version": uname.version,
        "python_full_version": _python_version(),
        "platform_python_implementation": {"cpython": "CPython", "pypy": "PyPy"}.get(
            sys.implementation.name, sys.implementation.name
        ),
        "python_version": "%d.%d" % sys.version_info[:2],
        "sys_platform": sys.platform,
    }


def libc() -> Optional[str]:
    try:
        value = os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):
        value = None
    if value:
        return value
    import platform  # musl and others: read the executable

    name, version = platform.libc_ver()
    return (name + " " + version).strip() or None


def interpreter(sites: List[str]) -> Dict[str, Any]:
    base_prefix = getattr(sys, "base_prefix", sys.prefix)
    uname = os.uname()
    return {
        "version": _python_version(),
        "implementation": sys.implementation.name,
        "executable": sys.executable,
        "prefix": sys.prefix,
        "base_prefix": base_prefix,
        "is_venv": sys.prefix != base_prefix,
        "os": uname.sysname.lower(),
        "machine": uname.machine,
        "libc": libc(),
        "site_packages": sites,
        "markers": marker_environment(),
    }


def probe(args: Dict[str, Any]) -> Dict[str, Any]:
    environ = dict(os.environ)
    # Slow external tools run while the file system is read.
    smi = _start(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    nvcc = _start(["nvcc", "--version"])
    warnings: List[str] = []
    sites = site_dirs()
    packages = scan_packages(sites, warnings)
    caches = []
    wanted = default_caches(environ) if args.get("default_caches", True) else []
    wanted += [(c["kind"], c["path"]) for c in args.get("caches", [])]
    for kind, path in wanted:
        cache = walk_tree(os.path.abspath(os.path.expanduser(path)))
        cache["kind"] = kind
        if cache["unreadable_dirs"]:
            warnings.append(
                "%s: %d unreadable entries not counted" % (cache["path"], cache["unreadable_dirs"])
            )
        caches.append(cache)
    return {
        "probe_version": PROBE_VERSION,
        "host": os.uname().nodename,
        "user": _user(),
        "interpreter": interpreter(sites),
        "packages": packages,
        "torch": torch_build(packages, warnings),
        "files": [hash_file(p) for p in args.get("files", [])],
        "repos": probe_repos(args, packages) if args.get("git") else [],
        "caches": caches,
        "env": capture_env(environ) if args.get("env", True) else {},
        "accelerator": accelerator(_finish(smi), _finish(nvcc)),
        "warnings": warnings,
    }


def main(argv: List[str]) -> int:
    args = json.loads(argv[1]) if len(argv) > 1 else {}
    sys.stdout.write(json.dumps(probe(args)))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
