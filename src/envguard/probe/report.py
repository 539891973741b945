"""The probe's report, validated in full on the host: it may come from a hostile host.

A forged, truncated, wrong-typed or oversized report becomes one ProbeError naming the
host (or interpreter) and the field, never a traceback.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError

from envguard.errors import ProbeError

# The version of probe/target/main.py this host sends; a report of another is refused.
PROBE_VERSION = 2
# A report larger than this is not a real environment's (271 real dists: about 0.3 MB).
MAX_REPORT_BYTES = 64 << 20

Line = Annotated[str, StringConstraints(pattern=r"^[^\x00-\x1f\x7f]*$", max_length=4096)]
Text = Annotated[str, StringConstraints(max_length=1 << 16)]


class _Part(BaseModel):
    # strict: a number is not a string, a string is not a list; forbid: no stray fields.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, defer_build=True)


class ReportInterpreter(_Part):
    version: Line
    implementation: Line
    executable: Line
    prefix: Line
    base_prefix: Line
    is_venv: bool
    os: Line
    machine: Line
    libc: Line | None = None
    site_packages: tuple[Line, ...] = ()
    markers: dict[Line, Line] = {}


class ReportDist(_Part):
    name: Line
    display_name: Line
    version: Line
    location: Line
    metadata_dir: Line
    installer: Line | None = None
    requested: bool = False
    direct_url: dict[str, Any] | None = None
    fingerprint: Line | None = None
    shadowed: bool = False


class ReportTorch(_Part):
    version: Line
    cuda: Line | None = None
    git_version: Line | None = None
    hip: Line | None = None
    debug: bool | None = None


class ReportFile(_Part):
    path: Line
    sha256: Line | None = None
    size: int | None = None
    error: Line | None = None


class ReportRepo(_Part):
    path: Line
    head: Line | None = None
    branch: Line | None = None
    dirty: bool = False
    diff_sha256: Line | None = None
    untracked: int = 0
    remote: Line | None = None
    error: Line | None = None


class ReportCache(_Part):
    kind: Line
    path: Line
    exists: bool
    readable: bool = True
    bytes: int = 0
    files: int = 0
    newest_mtime: float | None = None
    unreadable_dirs: int = 0


class ReportAccelerator(_Part):
    present: bool = False
    driver: Line | None = None
    gpus: tuple[Line, ...] = ()
    count: int = 0
    nvcc: Line | None = None
    source: Line | None = None


class ProbeReport(_Part):
    """What probe/target/main.py prints."""

    probe_version: int
    host: Annotated[str, StringConstraints(pattern=r"^[^\x00-\x1f\x7f/\\\s]{1,253}$")]
    user: Line
    interpreter: ReportInterpreter
    packages: tuple[ReportDist, ...]
    torch: ReportTorch | None
    files: tuple[ReportFile, ...]
    repos: tuple[ReportRepo, ...]
    caches: tuple[ReportCache, ...]
    env: dict[Line, Text]
    accelerator: ReportAccelerator
    warnings: tuple[Text, ...]


class ProbeFailure(_Part):
    """What the probe prints instead when it could not measure."""

    class Detail(_Part):
        kind: Literal["python_too_old", "memory", "failed"]
        message: Text

    probe_version: int | None = None
    error: Detail


def _where(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "top level"
    return f"{where}: {first['msg']}"


def _one_line(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)[:300]


def parse_report(
    stdout: bytes, *, label: str, returncode: int, stderr_tail: str, remote: bool = False
) -> ProbeReport:
    """The validated report, or ProbeError: the target's own error, or what is wrong."""
    if len(stdout) > MAX_REPORT_BYTES:
        raise ProbeError(f"{label}: the probe's report is larger than {MAX_REPORT_BYTES} bytes")
    invalid: ValidationError | None = None
    if returncode == 0:
        try:  # one pass parses and validates (JSON mode: arrays are tuples here)
            report = ProbeReport.model_validate_json(stdout)
        except ValidationError as exc:
            invalid = exc  # explained below, after what a person checks first
        except (ValueError, RecursionError):
            pass
        else:
            _check_version(report.probe_version, label=label)
            return report
    try:
        doc = json.loads(stdout) if stdout.strip() else None
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and "error" in doc:
        try:
            failure = ProbeFailure.model_validate_json(stdout)
        except ValidationError:
            raise ProbeError(f"{label}: the probe failed with a malformed error object") from None
        message = _one_line(failure.error.message)
        if failure.error.kind == "python_too_old":
            raise ProbeError(f"{label}: {message}")
        raise ProbeError(f"{label}: the probe failed: {message}")
    if returncode != 0:
        last = _one_line(stderr_tail.strip().splitlines()[-1]) if stderr_tail.strip() else ""
        what = f"failed (exit {returncode})" if remote else "not a working Python interpreter"
        raise ProbeError(f"{label}: {what}: {last or 'no output'}")
    if not isinstance(doc, dict) or "packages" not in doc:
        raise ProbeError(f"{label}: not a Python interpreter (it did not answer the probe)")
    _check_version(doc.get("probe_version"), label=label)
    if invalid is not None:
        raise ProbeError(f"{label}: invalid probe report at {_one_line(_where(invalid))}")
    raise ProbeError(f"{label}: invalid probe report (nested too deeply)")


def _check_version(found: object, *, label: str) -> None:
    if found != PROBE_VERSION:
        raise ProbeError(
            f"{label}: probe report version {_one_line(repr(found))}, expected {PROBE_VERSION}",
            hint="the far side answered with another envguard's probe; run the same envguard"
            " on both ends, or check what the --via command really runs",
        )
