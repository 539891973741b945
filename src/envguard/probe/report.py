"""The probe's report, validated in full on the host: it may come from a hostile host.

A forged, truncated, wrong-typed or oversized report becomes one ProbeError naming the
host (or interpreter) and the field, never a traceback. The checks are plain Python over a
declarative spec (a pydantic schema for it cost 28 ms at every start, on the critical path
of `envguard diff`); the TypedDicts below give the checked report its types.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, TypedDict, cast

if TYPE_CHECKING:  # a string below (annotations are not evaluated): 8 ms of import saved
    from typing_extensions import NotRequired

from envguard.errors import ProbeError
from envguard.reading import UNSAFE_CHARS, not_json_constant

# The version of probe/target/main.py this host sends; a report of another is refused.
PROBE_VERSION = 3
# A report larger than this is not a real environment's (271 real dists: about 0.3 MB).
MAX_REPORT_BYTES = 64 << 20
_CONTROL = re.compile("[" + UNSAFE_CHARS + "]")
_HOST = re.compile(r"^[^\x00-\x1f\x7f/\\\s]{1,253}$")


class ReportInterpreter(TypedDict):
    version: str
    implementation: str
    executable: str
    prefix: str
    base_prefix: str
    is_venv: bool
    os: str
    machine: str
    libc: str | None
    site_packages: list[str]
    markers: dict[str, str]


class ReportDist(TypedDict):
    name: str
    display_name: str
    version: str
    location: str
    metadata_dir: str
    installer: str | None
    requested: bool
    direct_url: dict[str, Any] | None
    fingerprint: str | None
    shadowed: bool
    requires: NotRequired[list[str]]


class ReportTorch(TypedDict):
    version: str
    cuda: str | None
    git_version: str | None
    hip: str | None
    debug: bool | None


class ReportFile(TypedDict):
    path: str
    sha256: str | None
    size: int | None
    error: str | None


class ReportRepo(TypedDict, total=False):
    path: str
    head: str | None
    branch: str | None
    dirty: bool
    diff_sha256: str | None
    untracked: int
    remote: str | None
    error: str | None


class ReportCache(TypedDict):
    kind: str
    path: str
    exists: bool
    readable: bool
    bytes: int
    files: int
    newest_mtime: float | None
    unreadable_dirs: int
    error: str | None


class ReportAccelerator(TypedDict):
    present: bool
    driver: str | None
    gpus: list[str]
    count: int
    nvcc: str | None
    source: str | None


class ProbeReport(TypedDict):
    """What probe/target/main.py prints."""

    probe_version: int
    host: str
    user: str
    interpreter: ReportInterpreter
    packages: list[ReportDist]
    torch: ReportTorch | None
    files: list[ReportFile]
    repos: list[ReportRepo]
    caches: list[ReportCache]
    env: dict[str, str]
    accelerator: ReportAccelerator
    warnings: list[str]


class _Invalid(Exception):
    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")


# Kinds: "line" (one line of text), "text" (any string), "int", "bool", "number", "host",
# "object" (any JSON object); ("?", kind) may be null; ("list", kind); ("map", kind) has
# line keys; a dict is an object with exactly these keys (those in _OPTIONAL may be absent).
_LINE_MAX, _TEXT_MAX = 4096, 1 << 16
_S: dict[str, Any] = {
    "interpreter": {
        "version": "line",
        "implementation": "line",
        "executable": "line",
        "prefix": "line",
        "base_prefix": "line",
        "is_venv": "bool",
        "os": "line",
        "machine": "line",
        "libc": ("?", "line"),
        "site_packages": ("list", "line"),
        "markers": ("map", "line"),
    },
    "dist": {
        "name": "line",
        "display_name": "line",
        "version": "line",
        "location": "line",
        "metadata_dir": "line",
        "installer": ("?", "line"),
        "requested": "bool",
        "direct_url": ("?", "object"),
        "fingerprint": ("?", "line"),
        "shadowed": "bool",
        "requires": ("list", "line"),
    },
    "torch": {
        "version": "line",
        "cuda": ("?", "line"),
        "git_version": ("?", "line"),
        "hip": ("?", "line"),
        "debug": ("?", "bool"),
    },
    "file": {"path": "line", "sha256": ("?", "line"), "size": ("?", "int"), "error": ("?", "line")},
    "repo": {
        "path": "line",
        "head": ("?", "line"),
        "branch": ("?", "line"),
        "dirty": "bool",
        "diff_sha256": ("?", "line"),
        "untracked": "int",
        "remote": ("?", "line"),
        "error": ("?", "line"),
    },
    "cache": {
        "kind": "line",
        "path": "line",
        "exists": "bool",
        "readable": "bool",
        "bytes": "int",
        "files": "int",
        "newest_mtime": ("?", "number"),
        "unreadable_dirs": "int",
        "error": ("?", "line"),
    },
    "accelerator": {
        "present": "bool",
        "driver": ("?", "line"),
        "gpus": ("list", "line"),
        "count": "int",
        "nvcc": ("?", "line"),
        "source": ("?", "line"),
    },
}
REPORT_SPEC: dict[str, Any] = {
    "probe_version": "int",
    "host": "host",
    "user": "line",
    "interpreter": _S["interpreter"],
    "packages": ("list", _S["dist"]),
    "torch": ("?", _S["torch"]),
    "files": ("list", _S["file"]),
    "repos": ("list", _S["repo"]),
    "caches": ("list", _S["cache"]),
    "env": ("map", "text"),
    "accelerator": _S["accelerator"],
    "warnings": ("list", "text"),
}
# A repo the far side could not read carries only its path and the error.
_OPTIONAL = frozenset({"head", "branch", "dirty", "diff_sha256", "untracked", "remote"})


def _check(value: Any, spec: Any, where: str) -> None:
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            raise _Invalid(where, "expected an object")
        for key in value:
            if key not in spec:
                raise _Invalid(f"{where}.{key}" if where else str(key), "unexpected field")
        for key, inner in spec.items():
            path = f"{where}.{key}" if where else key
            if key in value:
                _check(value[key], inner, path)
            elif key not in _OPTIONAL:
                raise _Invalid(path, "field required")
        return
    if isinstance(spec, tuple):
        kind, inner = spec
        if kind == "?":
            if value is not None:
                _check(value, inner, where)
        elif kind == "list":
            if not isinstance(value, list):
                raise _Invalid(where, "expected an array")
            for i, item in enumerate(value):
                _check(item, inner, f"{where}.{i}")
        else:  # map
            if not isinstance(value, dict):
                raise _Invalid(where, "expected an object")
            for key, item in value.items():
                _check(key, "line", f"{where} key")
                _check(item, inner, f"{where}.{key}")
        return
    if spec in ("line", "text", "host"):
        if not isinstance(value, str):
            raise _Invalid(where, "expected a string")
        if spec == "host" and not _HOST.match(value):
            raise _Invalid(where, "not a host name")
        if spec == "line" and (len(value) > _LINE_MAX or _CONTROL.search(value)):
            raise _Invalid(where, "not one line of text")
        if spec == "text" and len(value) > _TEXT_MAX:
            raise _Invalid(where, "too long")
    elif spec == "bool":
        if not isinstance(value, bool):
            raise _Invalid(where, "expected true or false")
    elif spec == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            raise _Invalid(where, "expected an integer")
    elif spec == "number":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise _Invalid(where, "expected a number")
    elif spec == "object" and not isinstance(value, dict):
        raise _Invalid(where, "expected an object")


_FAILURE_KINDS = ("python_too_old", "memory", "failed")


def _one_line(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)[:300]


def _loads(stdout: bytes) -> Any:
    return json.loads(stdout, parse_constant=not_json_constant)


def parse_report(
    stdout: bytes, *, label: str, returncode: int, stderr_tail: str, remote: bool = False
) -> ProbeReport:
    """The validated report, or ProbeError: the target's own error, or what is wrong."""
    if len(stdout) > MAX_REPORT_BYTES:
        raise ProbeError(f"{label}: the probe's report is larger than {MAX_REPORT_BYTES} bytes")
    try:
        doc = _loads(stdout) if stdout.strip() else None
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and "error" in doc:
        error = doc["error"]
        if (
            not isinstance(error, dict)
            or error.get("kind") not in _FAILURE_KINDS
            or not isinstance(error.get("message"), str)
        ):
            raise ProbeError(f"{label}: the probe failed with a malformed error object")
        message = _one_line(error["message"])
        if error["kind"] == "python_too_old":
            raise ProbeError(f"{label}: {message}")
        raise ProbeError(f"{label}: the probe failed: {message}")
    if returncode != 0:
        last = _one_line(stderr_tail.strip().splitlines()[-1]) if stderr_tail.strip() else ""
        what = f"failed (exit {returncode})" if remote else "not a working Python interpreter"
        raise ProbeError(f"{label}: {what}: {last or 'no output'}")
    if not isinstance(doc, dict) or "packages" not in doc:
        raise ProbeError(f"{label}: not a Python interpreter (it did not answer the probe)")
    _check_version(doc.get("probe_version"), label=label)
    try:
        _check(doc, REPORT_SPEC, "")
    except _Invalid as exc:
        raise ProbeError(f"{label}: invalid probe report at {_one_line(str(exc))}") from None
    except RecursionError:
        raise ProbeError(f"{label}: invalid probe report (nested too deeply)") from None
    return cast(ProbeReport, doc)


def _check_version(found: object, *, label: str) -> None:
    if found != PROBE_VERSION:
        raise ProbeError(
            f"{label}: probe report version {_one_line(repr(found))}, expected {PROBE_VERSION}",
            hint="the far side answered with another envguard's probe; run the same envguard"
            " on both ends, or check what the --via command really runs",
        )
