"""The probe's report, validated in full on the host: it may come from a hostile host.

A forged, truncated, wrong-typed or oversized report becomes one ProbeError naming the
host (or interpreter) and the field, never a traceback. The checks are plain Python over a
declarative spec (a pydantic schema for it would be built at every start, on the critical path
of `envguard diff`), generated from the one declaration of its shape: the TypedDicts of
probe/report_shape.py, which also type the checked report.
"""

from __future__ import annotations

import re

from envguard.errors import ProbeError
from envguard.probe.spec import REPORT_SPEC
from envguard.reading import UNSAFE_CHARS, json_loads

TYPE_CHECKING = False  # typing is not loaded for a command's start

if TYPE_CHECKING:
    from typing import Any

    from envguard.probe.report_shape import ProbeReport

# The version of probe/target/main.py this host sends; a report of another is refused.
PROBE_VERSION = 9
# A report larger than this is not a real environment's (271 real dists: about 0.3 MB).
MAX_REPORT_BYTES = 64 << 20
_CONTROL = re.compile("[" + UNSAFE_CHARS + "]")
_HOST = re.compile(r"^[^\x00-\x1f\x7f/\\\s]{1,253}$")


class _Invalid(Exception):
    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")


_LINE_MAX, _TEXT_MAX = 4096, 1 << 16


def _check(value: Any, spec: Any, where: str) -> None:
    if isinstance(spec, tuple) and spec[0] == "fields":
        _, fields, optional = spec
        if not isinstance(value, dict):
            raise _Invalid(where, "expected an object")
        for key in value:
            if key not in fields:
                raise _Invalid(f"{where}.{key}" if where else str(key), "unexpected field")
        for key, inner in fields.items():
            path = f"{where}.{key}" if where else key
            if key in value:
                _check(value[key], inner, path)
            elif key not in optional:
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
                _check(key, "line", f"{where}, a name")
                _check(item, inner, f"{where}.{key}")
        return
    if spec in ("line", "text", "host"):
        if not isinstance(value, str):
            raise _Invalid(where, "expected a string")
        if spec == "host" and not _HOST.match(value):
            raise _Invalid(where, "not a host name")
        if spec == "line" and (
            len(value) > _LINE_MAX or (not value.isprintable() and _CONTROL.search(value))
        ):
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
    return json_loads(stdout)


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
    return validate_report(
        doc, label=label, returncode=returncode, stderr_tail=stderr_tail, remote=remote
    )


def validate_report(
    doc: object, *, label: str, returncode: int, stderr_tail: str = "", remote: bool = True
) -> ProbeReport:
    """parse_report() of a report already parsed from JSON (None: it was not JSON)."""
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
    return doc  # type: ignore[return-value]  # checked against REPORT_SPEC just now


def _check_version(found: object, *, label: str) -> None:
    if found != PROBE_VERSION:
        raise ProbeError(
            f"{label}: probe report version {_one_line(repr(found))}, expected {PROBE_VERSION}",
            hint="the far side answered with another envguard's probe; run the same envguard"
            " on both ends, or check what the --via command really runs",
        )
