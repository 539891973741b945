"""The interpreter, the user and the accelerator: facts about the machine, not packages."""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import os
import stat
import sys

from .confine import on_path, spawn_piped
from .reading import UNSAFE_CHARS, escaped_line, escaped_name, read_text, report_line

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Sequence, Tuple

    from .distcache import DistCache


def enter_venv() -> None:
    """Set sys.prefix as site.py would for a venv (``-S`` skips site.py, and with it its
    pyvenv.cfg lookup): the directory above the executable's, when pyvenv.cfg is there."""
    exe_dir = os.path.dirname(os.path.abspath(sys.executable))
    site_prefix = os.path.dirname(exe_dir)
    for candidate in (os.path.join(exe_dir, "pyvenv.cfg"), os.path.join(site_prefix, "pyvenv.cfg")):
        if os.path.isfile(candidate):
            sys.prefix = sys.exec_prefix = site_prefix
            return


def user() -> str:
    """The user name as getpass.getuser() finds it, without importing getpass."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        if os.environ.get(name):
            return os.environ[name]
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):  # no passwd entry inside some containers
        return str(os.getuid()) if hasattr(os, "getuid") else "unknown"


def host_name() -> str:
    """This machine's name as a report's host: the kernel takes any 64 bytes, the host a
    name without spaces, slashes, controls or bidi marks. Those are written as their UTF-8
    bytes in %XX (``odd%20node``): distinct names stay distinct, and each probe of one
    machine writes its name alike."""
    name = os.uname().nodename
    odd = "[\\s/\\\\" + UNSAFE_CHARS + "\ud800-\udfff]"
    if name.isprintable() and " " not in name and "/" not in name and "\\" not in name:
        return name or "unknown"
    import re

    return re.sub(
        odd,
        lambda m: "".join("%%%02X" % b for b in m.group(0).encode("utf-8", "surrogateescape")),
        name,
    )


def user_line() -> str:
    """user() as the report carries it: escaped, at most 256 characters (LOGNAME and USER
    are whatever the environment says; the cache folders keep the name as it is)."""
    return escaped_name(user())[:256]


def _full_version(info: Any) -> str:
    version = "%d.%d.%d" % (info.major, info.minor, info.micro)
    if info.releaselevel != "final":
        version += info.releaselevel[0] + str(info.serial)
    return version


def marker_environment() -> Dict[str, str]:
    """PEP 508 marker values of this interpreter (as packaging.markers computes them). The
    kernel's answers are what its build (or a shim) wrote: any bytes, each written as its
    escape where the report could not carry it as one line."""
    uname = _uname()
    return {
        "implementation_name": sys.implementation.name,
        "implementation_version": _full_version(sys.implementation.version),
        "os_name": os.name,
        "platform_machine": uname["machine"],
        "platform_release": uname["release"],
        "platform_system": uname["sysname"],
        "platform_version": uname["version"],
        "python_full_version": _full_version(sys.version_info),
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


def _uname() -> Dict[str, str]:
    """os.uname()'s fields by name, each one printable line (escaped_line)."""
    found = os.uname()
    return {
        f: escaped_line(getattr(found, f)) for f in ("sysname", "release", "version", "machine")
    }


def interpreter(sites: List[str]) -> Dict[str, Any]:
    base_prefix = getattr(sys, "base_prefix", sys.prefix)
    uname = _uname()
    return {
        "version": _full_version(sys.version_info),
        "implementation": sys.implementation.name,
        # The interpreter's own paths, as one line each: a venv's folder may be named
        # with any character a file system allows.
        "executable": escaped_name(sys.executable),
        "prefix": escaped_name(sys.prefix),
        "base_prefix": escaped_name(base_prefix),
        "is_venv": sys.prefix != base_prefix,
        "os": uname["sysname"].lower(),
        "machine": uname["machine"],
        "libc": libc(),
        "site_packages": [escaped_name(site) for site in sites],
        "markers": marker_environment(),
    }


def _which(name: str) -> Optional[str]:
    return on_path(name, os.environ.get("PATH", ""))


# A tool whose ``--version`` is its own binary's answer, by the name of the program it
# resolves to: nvcc and the C++ compilers, not a wrapper that runs whichever compiler comes
# next on PATH (ccache, distcc). A script is followed only when all it does is ``exec`` one
# program by its absolute path with its own arguments (/usr/bin/nvcc on Debian).
_OWN_ANSWER = ("nvcc", "g++", "c++", "clang", "icpc", "icpx")  # in the name, anywhere
_SHELLS = (b"#!/bin/sh", b"#!/bin/bash", b"#!/usr/bin/env sh", b"#!/usr/bin/env bash")
# The one line such a script may hold: exec, a path of these characters, "$@".
_PATH_BYTES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./+-"
_SCRIPT_CAP = 4096
_ANSWER_CAP = 64 << 10


def start_version(
    path: Optional[str], cache: Optional[DistCache], timeout: float = 15.0
) -> Dict[str, Any]:
    """``path --version`` as finish_version() will answer it: kept in the distribution
    cache under the stamps of the program that answers (and of the exec wrapper that
    runs it), where that answer is the program's own: an unchanged nvcc or g++ is not
    started again at every probe. Otherwise started now, to run while the probe reads."""
    job: Dict[str, Any] = {"started": None, "key": None, "stamp": None, "timeout": timeout}
    if path is None:
        return job
    found = _answering(path) if cache is not None else None
    if cache is not None and found is not None:
        from .distcache import file_stamp

        program, files = found
        stamps = [file_stamp(f) for f in files]
        # The path it is run by too: a compiler's first line names it (g++ vs c++).
        job["key"] = "TOOL\0%s\0%s\0--version" % (path, program)
        job["stamp"] = None if None in stamps else ";".join(s for s in stamps if s)
        held = cache.lib(job["key"], job["stamp"])
        text = held.get("text") if held is not None else None
        if type(text) is str and len(text) <= _ANSWER_CAP:
            job["text"] = text
            return job
    job["started"] = start_tool([path, "--version"])
    return job


def _answering(path: str) -> Optional[Tuple[str, List[str]]]:
    """(the program whose own answer ``path --version`` prints, the files that answer
    depends on), or None where it may be another's (see _OWN_ANSWER)."""
    real = os.path.realpath(path)
    head = _head(real)
    files = [real]
    if head is not None and head.startswith(b"#!"):
        lines = [ln.strip() for ln in head.splitlines()]
        body = [ln for ln in lines[1:] if ln and not ln.startswith(b"#")]
        ran = _exec_line(body[0]) if len(body) == 1 and lines[0] in _SHELLS else None
        if ran is None:
            return None
        real = os.path.realpath(ran.decode("ascii"))
        head = _head(real)
        files.append(real)
    name = os.path.basename(real)
    if head is None or head[:4] != b"\x7fELF" or not any(map(name.__contains__, _OWN_ANSWER)):
        return None
    return real, files


def _exec_line(line: bytes) -> Optional[bytes]:
    """The program a script's one line ``exec /path "$@"`` runs (spaces or tabs between
    its three words, any after them), else None. In bytes operations: every probe reads
    Debian's nvcc wrapper, where re is not loaded (reading.Regex)."""
    words = [word for word in line.replace(b"\t", b" ").split(b" ") if word]
    if len(words) != 3 or not line.startswith(b"exec") or words[::2] != [b"exec", b'"$@"']:
        return None
    path = words[1]
    if not (2 <= len(path) <= 4001 and path[:1] == b"/") or path.translate(None, _PATH_BYTES):
        return None
    return path


def _head(path: str) -> Optional[bytes]:
    """The first bytes of the regular file ``path`` (all of it up to _SCRIPT_CAP; a
    longer script is not one to follow), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        head = os.read(fd, _SCRIPT_CAP)
        return head if head[:2] != b"#!" or st.st_size <= _SCRIPT_CAP else b"#!"
    except OSError:
        return None
    finally:
        os.close(fd)


def finish_version(job: Dict[str, Any], cache: Optional[DistCache]) -> Optional[str]:
    """What start_version() started printed (kept when it may be), or what was kept."""
    if "text" in job:
        text: Optional[str] = job["text"]
        return text
    text = finish_tool(job["started"], timeout=job["timeout"])
    # A failure is not kept: asked again next time.
    ok = text is not None and len(text) <= _ANSWER_CAP
    if ok and job["key"] is not None and cache is not None:
        cache.keep_lib(job["key"], job["stamp"], {"text": text})
    return text


def which(name: str) -> Optional[str]:
    """Where ``name`` runs from on this process's PATH (a PATH lookup, nothing started)."""
    return _which(name)


def start_tool(argv: List[str]) -> Optional[Tuple[int, int]]:
    """Start a tool with stdout on a pipe (posix_spawn: no subprocess import); (pid, fd)."""
    exe = _which(argv[0])
    if exe is None or not hasattr(os, "posix_spawn"):
        return None
    try:
        return spawn_piped(exe, [exe, *argv[1:]], os.environ)
    except OSError:
        return None


def finish_tool(started: Optional[Tuple[int, int]], timeout: float = 15.0) -> Optional[str]:
    """The tool's stdout (at most 1 MiB) when it exits 0 within ``timeout``, else None."""
    if started is None:
        return None
    import select
    import time

    pid, fd = started
    chunks: List[bytes] = []
    total = 0
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        while total <= 1 << 20:
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
                total += len(data)
    finally:
        os.close(fd)
    pause = 0.0002  # a tool that closed stdout is most often exiting: look again soon
    while True:  # stdout is closed; the tool may still hang: wait no longer than the deadline
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            timed_out = True
            os.kill(pid, 9)
            _, status = os.waitpid(pid, 0)
            break
        time.sleep(pause)
        pause = min(pause * 2, 0.005)
    if timed_out or not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        return None
    return b"".join(chunks).decode("utf-8", "replace")


# nvidia-smi's columns, asked in one query: once asked apart, as name,driver_version and
# compute_cap (a start of nvidia-smi is most of its cost).
GPU_COLUMNS = "name,driver_version,compute_cap"
_DRIVER_NODES = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/dxg")


def gpu_answers(
    started: Optional[Tuple[int, int]], nodes: Sequence[str] = _DRIVER_NODES
) -> Tuple[Optional[str], Optional[str]]:
    """What ``nvidia-smi --query-gpu=name,driver_version`` and ``--query-gpu=compute_cap``
    (``--format=csv,noheader``) would each print, from the one query of GPU_COLUMNS that
    ``started`` ran: each row split at its last comma. Where that query does not answer in
    three columns a row, or fails beside a driver (one before compute_cap, R510, refuses
    the column), the two are asked apart as before; (None, None) where there is none."""
    if started is None:
        return None, None  # not on PATH: nothing more to ask
    text = finish_tool(started)
    rows = (text or "").splitlines()
    if text is not None and all(row.count(",") >= 2 for row in rows if row.strip()):
        parts = [row.rpartition(",") for row in rows]
        return "".join(p[0] + "\n" for p in parts), "".join(p[2].lstrip(" ") + "\n" for p in parts)
    if text is None and not any(os.path.exists(node) for node in nodes):
        return None, None  # no driver: the queries apart would fail as this one did
    smi = start_tool(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    caps = start_tool(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"])
    return finish_tool(smi), finish_tool(caps)


def proc_gpus(proc: str = "/proc") -> List[str]:
    """The GPU models the kernel module lists (driver/nvidia/gpus/*/information), in bus
    order: what nvidia-smi would name where it is not installed (a container without it)."""
    import re

    base = proc + "/driver/nvidia/gpus"
    try:
        buses = sorted(os.listdir(base))[:64]
    except OSError:
        return []
    out = []
    for bus in buses:
        match = re.search(
            r"^Model:\s*(\S[^\n]{0,200})", read_text(base + "/" + bus + "/information") or "", re.M
        )
        if match:
            out.append(re.sub("[" + UNSAFE_CHARS + "]", " ", match.group(1)).strip())
    return out


def nvcc_release(text: str) -> Optional[str]:
    """What ``re.search(r"release [0-9.]+, V([0-9.]+)", text)`` finds of ``nvcc --version``
    ("Cuda compilation tools, release 12.8, V12.8.93": 12.8.93), by string operations: re
    is not loaded for it (8 ms of the CPU of a probe where nvcc is installed)."""

    def run(at: int) -> int:  # where the run of digits and dots at ``at`` ends
        while at < len(text) and text[at] in "0123456789.":
            at += 1
        return at

    at = text.find("release ")
    while at >= 0:
        start = at + len("release ")
        end = run(start)
        if end > start and text.startswith(", V", end):
            version_end = run(end + 3)
            if version_end > end + 3:
                return text[end + 3 : version_end]
        at = text.find("release ", at + 1)
    return None


def accelerator(smi: Optional[str], nvcc: Optional[str], proc: str = "/proc") -> Dict[str, Any]:
    """GPUs and driver from nvidia-smi's CSV (else the kernel module's file under ``proc``),
    and nvcc's release."""
    gpus: List[str] = []
    driver = None
    source = None
    if smi:
        # nvidia-smi is whichever program PATH names: its answer is one line per GPU,
        # escaped, a name over 256 characters (a driver over 64) left out.
        for line in smi.splitlines():
            parts = [p.strip() for p in line.split(",")]
            name = report_line(parts[0], 256) if len(parts) >= 2 and parts[0] else None
            if name is not None:
                gpus.append(name)
                driver = driver or report_line(parts[1], 64)
        source = "nvidia-smi" if gpus else None
    if driver is None:
        text = read_text(proc + "/driver/nvidia/version")
        match = None
        if text:  # a driver without nvidia-smi: re is loaded only then
            import re

            match = re.search(r"Kernel Module(?: for [\w]+)?\s+([0-9][0-9.]+)", text)
        driver = report_line(match.group(1), 64) if match else None
        if driver is not None:
            source = "/proc/driver/nvidia/version"
    if not gpus and driver is not None:
        gpus = proc_gpus(proc)
    found = nvcc_release(nvcc) if nvcc else None
    nvcc_version = report_line(found, 64) if found else None
    return {
        "present": bool(gpus) or driver is not None,
        "driver": driver,
        "gpus": gpus,
        "count": len(gpus),
        "nvcc": nvcc_version,
        "source": source,
    }
