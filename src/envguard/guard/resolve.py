"""The dry run: what an install would do to the venv, asked of the installer itself without
touching the venv (``uv pip install --dry-run --output-format json``, ``pip install
--dry-run --report -``), under a deadline. Its output is untrusted text: checked, capped."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from envguard.errors import UsageError
from envguard.guard import nesting
from envguard.guard.command import InstallCommand
from envguard.lifecycle import end_chain, forget, start_child
from envguard.reading import not_json_constant

if TYPE_CHECKING:
    from envguard.guard.project import ProjectPreview

OUTPUT_CAP = 64 << 20


@dataclass(frozen=True)
class Planned:
    """A distribution the install would put in the venv."""

    name: str
    version: str
    requires: tuple[str, ...] = ()
    requested: bool = False
    # The wheel it would come from, where the installer's report says (pip's does).
    url: str | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class Resolution:
    """What the install would remove (name -> version) and put in."""

    removed: dict[str, str] = field(default_factory=dict)
    installed: tuple[Planned, ...] = ()
    requires_known: bool = False

    def touched(self) -> set[str]:
        return set(self.removed) | {p.name for p in self.installed}

    def removals(self) -> dict[str, str]:
        """What goes and is not put back (``removed`` also holds what an upgrade replaces)."""
        put_back = {p.name for p in self.installed}
        return {n: v for n, v in self.removed.items() if n not in put_back}


def dry_run_argv(command: InstallCommand, *, venv: Path, uv: str) -> list[str]:
    """The installer's own preview of ``command`` for the venv at ``venv``."""
    python = str(venv / "bin" / "python")
    if command.tool == "uv":
        return [
            uv,
            "pip",
            command.action,
            "--dry-run",
            "--output-format",
            "json",
            "--python",
            python,
            *command.args,
        ]
    return [
        python,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--quiet",
        "--disable-pip-version-check",
        "--report",
        "-",
        *command.args,
    ]


class DryRun:
    """A dry run started: finish() reads what it says (it runs while the venv is probed),
    cancel() stops it."""

    def __init__(
        self,
        command: InstallCommand,
        argv: list[str],
        proc: subprocess.Popen[bytes] | None,
        *,
        deadline: float,
        timeout: float,
    ) -> None:
        self.command, self.argv, self.proc = command, argv, proc
        self.deadline, self.timeout = deadline, timeout
        self.resolution: Resolution | None = None

    @classmethod
    def answered(cls, command: InstallCommand, seen: ProjectPreview) -> DryRun:
        """A dry run that already ran (uv's project commands: see guard/project.py)."""
        done = cls(command, list(seen.argv), None, deadline=0.0, timeout=0.0)
        done.resolution = seen.resolution
        return done

    def running(self) -> bool:
        """The installer is still at it (nothing read from it yet)."""
        return self.proc is not None and self.resolution is None and self.proc.poll() is None

    def cancel(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            _stop(self.proc)
            forget(self.proc.pid)

    def finish(self, installed: Mapping[str, str]) -> Resolution:
        """What the install would change in the venv whose packages are ``installed``."""
        command = self.command
        if self.resolution is not None:
            return self.resolution
        if self.proc is None:  # an uninstall: what it names, as installed
            return Resolution(
                removed={n: installed[n] for n in command.requested if n in installed},
                requires_known=True,
            )
        out = read_output(self.proc, self.deadline, timeout=self.timeout, label=command.tool)
        try:
            data = json.loads(out, parse_constant=not_json_constant)
            if command.tool == "uv":
                return _from_uv(data, requested=command.requested)
            return _from_pip(data, installed)
        except (ValueError, TypeError, KeyError, RecursionError) as exc:
            raise UsageError(
                f"the {command.tool} dry run said something envguard does not read ({exc})",
                hint="run the dry run yourself to see it: " + " ".join(self.argv[:4]) + " ...",
            ) from None


def start(
    command: InstallCommand, *, venv: Path, uv: str, env: Mapping[str, str], timeout: float
) -> DryRun:
    """Start the installer's dry run of ``command`` for ``venv`` (none for an uninstall:
    it removes what it names), with ``timeout`` seconds to finish."""
    import time

    deadline = time.monotonic() + timeout
    if command.action == "uninstall":
        if command.files:
            raise UsageError("an uninstall from a requirements file is not previewed")
        return DryRun(command, [], None, deadline=deadline, timeout=timeout)
    argv = dry_run_argv(command, venv=venv, uv=uv)
    return DryRun(command, argv, start_reading(argv, env), deadline=deadline, timeout=timeout)


def start_reading(
    argv: list[str], env: Mapping[str, str], *, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """An installer's dry run started, its output read by read_output()."""
    return start_child(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env),
        cwd=None if cwd is None else str(cwd),
    )


def read_output(
    proc: subprocess.Popen[bytes],
    deadline: float,
    *,
    timeout: float,
    label: str,
    noun: str = "dry run",
) -> bytes:
    """What a dry run wrote, once it ended by ``deadline``; UsageError (the child stopped)
    when it did not, failed, or wrote more than OUTPUT_CAP."""
    import time

    try:
        out, err = proc.communicate(timeout=max(0.001, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _stop(proc)
        raise UsageError(
            f"the {label} {noun} did not finish in {timeout:g} s; nothing was installed",
            hint="--timeout SECONDS gives it longer (an index that does not answer?)",
        ) from None
    except BaseException:
        _stop(proc)
        raise
    finally:
        forget(proc.pid)
    if proc.returncode != 0:
        from envguard.redact import redact_text

        last = [ln for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()][-3:]
        raise UsageError(
            f"the {label} {noun} failed (exit {proc.returncode}); nothing was installed: "
            + redact_text(" / ".join(s.strip() for s in last))[:600],
        )
    if len(out) > OUTPUT_CAP:
        raise UsageError(f"the {label} {noun} wrote more than {OUTPUT_CAP >> 20} MiB")
    return out


def _stop(proc: subprocess.Popen[bytes]) -> None:
    end_chain(proc)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _text(value: object, what: str) -> str:
    from envguard.reading import UNSAFE_CHARS

    if not isinstance(value, str) or not value or len(value) > 512:
        raise ValueError(f"{what} is not a short string")
    if any(ch in value for ch in "\n\r\x00") or _unsafe(value, UNSAFE_CHARS):
        raise ValueError(f"{what} is not one line")
    return value


def _version(value: object) -> str:
    """A version from an installer's report, once it is PEP 440's: it is written into the
    requirements file that pins the install (``name==VERSION --hash=...``), where a
    version holding words (`1.0 --index-url URL`, `1.0 ; python_version < "0"`) would be
    more options or a marker."""
    from packaging.version import InvalidVersion, Version

    text = _text(value, "a version")
    try:
        Version(text)
    except InvalidVersion:
        raise ValueError(f"a version is not PEP 440's ({text[:40]!r})") from None
    if text != text.strip():
        raise ValueError(f"a version is not PEP 440's ({text[:40]!r})")
    return text


def _unsafe(value: str, chars: str) -> bool:
    import re

    return re.search("[" + chars + "]", value) is not None


def _from_uv(data: object, *, requested: tuple[str, ...]) -> Resolution:
    if not isinstance(data, dict):
        raise ValueError("not an object")
    return from_uv_changes(data.get("changes"), requested=requested)


def from_uv_changes(changes: object, *, requested: tuple[str, ...]) -> Resolution:
    """The Resolution of uv's JSON list of changes (`uv pip install --dry-run` and `uv sync
    --dry-run` write the same list); ValueError for what is not one."""
    from packaging.utils import canonicalize_name

    if not isinstance(changes, list):
        raise ValueError("no list of changes")
    removed: dict[str, str] = {}
    added: dict[str, str] = {}
    for change in changes:
        if not isinstance(change, dict):
            raise ValueError("a change is not an object")
        name = canonicalize_name(_text(change.get("name"), "a name"))
        version = _version(change.get("version"))
        action = change.get("action")
        if action == "uninstalled":
            removed[name] = version
        elif action in ("installed", "reinstalled"):
            added[name] = version
        else:
            raise ValueError(f"an unknown action {str(action)[:40]!r}")
    installed = tuple(
        Planned(name=n, version=v, requested=n in requested) for n, v in sorted(added.items())
    )
    return Resolution(removed=removed, installed=installed)


def _from_pip(data: object, installed: Mapping[str, str]) -> Resolution:
    from packaging.utils import canonicalize_name

    if not isinstance(data, dict) or not isinstance(data.get("install"), list):
        raise ValueError("no install list")
    planned: list[Planned] = []
    removed: dict[str, str] = {}
    for item in data["install"]:
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict):
            raise ValueError("an install item without metadata")
        name = canonicalize_name(_text(meta.get("name"), "a name"))
        version = _version(meta.get("version"))
        reqs = meta.get("requires_dist") or []
        if not isinstance(reqs, list) or len(reqs) > 2000:
            raise ValueError(f"{name}'s requires_dist is not a list")
        requires = tuple(_text(r, "a requirement") for r in reqs)
        url, digest = _download_info(item.get("download_info"))
        planned.append(
            Planned(
                name=name,
                version=version,
                requires=requires,
                requested=item.get("requested") is True,
                url=url,
                sha256=digest,
            )
        )
        # pip replaces an installed distribution of the same name (a reinstall too).
        if name in installed:
            removed[name] = installed[name]
    return Resolution(
        removed=removed, installed=tuple(sorted(planned, key=lambda p: p.name)), requires_known=True
    )


def _download_info(info: object) -> tuple[str | None, str | None]:
    """(the wheel's URL, its sha256) from a pip report's ``download_info`` (PEP 610's
    shape); None for what is not a wheel with a sha256."""
    if not isinstance(info, dict):
        return None, None
    url = wheel_url(info.get("url"))
    archive = info.get("archive_info")
    digest = None
    if isinstance(archive, dict):
        hashes = archive.get("hashes")
        if isinstance(hashes, dict):
            digest = sha256_of(hashes.get("sha256"))
        legacy = archive.get("hash")
        if digest is None and isinstance(legacy, str) and legacy.startswith("sha256="):
            digest = sha256_of(legacy[len("sha256=") :])
    return (url, digest) if url is not None and digest is not None else (None, None)


def sha256_of(value: object) -> str | None:
    """A sha256 hex digest as an installer's report holds one (None: not one)."""
    if isinstance(value, str):
        value = value.lower()
        if len(value) == 64 and all(ch in "0123456789abcdef" for ch in value):
            return value
    return None


def wheel_url(value: object) -> str | None:
    """A wheel's URL, one line and bounded (None: not a wheel's)."""
    if not isinstance(value, str) or len(value) > 4096 or not value.endswith(".whl"):
        return None
    if any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in value):
        return None  # a blank or a control character: not a URL a report means
    return value if value.startswith(("https://", "http://", "file://")) else None


def installer_env(venv: Path, base: Mapping[str, str]) -> dict[str, str]:
    """The user's environment with ``venv`` active: ``pip`` and ``python`` are the venv's,
    uv installs into it, and uv's project commands sync it."""
    from envguard.guard.protect import guard_constraints

    env = project_env(base, venv)
    held = None if "PIP_CONSTRAINT" in env else guard_constraints(venv)
    if held is not None:
        # The guard decides what changes; protect's pins are for pip run without it.
        env["PIP_CONSTRAINT"] = held
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = str(venv / "bin") + os.pathsep + env.get("PATH", os.defpath)
    return env


def project_env(base: Mapping[str, str], venv: Path | None) -> dict[str, str]:
    """The user's environment without what would point an installer elsewhere, marked as
    the guard's (protect's shim and hook let what runs in it through); uv's project
    commands sync ``venv`` (None: the project's own environment, as uv finds it, the
    user's UV_PROJECT_ENVIRONMENT included)."""
    env = {k: v for k, v in base.items() if k not in RETARGETING_VARIABLES}
    if venv is not None:
        env["UV_PROJECT_ENVIRONMENT"] = str(venv)
    elif base.get("UV_PROJECT_ENVIRONMENT"):
        env["UV_PROJECT_ENVIRONMENT"] = base["UV_PROJECT_ENVIRONMENT"]
    return nesting.marked(env, venv=venv)


# Variables that would point the installer somewhere else than the venv the dry run
# previewed (as --python, --target, ... would): left out of its environment.
RETARGETING_VARIABLES = frozenset(
    {
        "CONDA_PREFIX",
        "UV_PYTHON",
        "UV_SYSTEM_PYTHON",
        "UV_PROJECT_ENVIRONMENT",
        "PIP_TARGET",
        "PIP_PREFIX",
        "PIP_ROOT",
        "PIP_USER",
        "PIP_PYTHON",
    }
)
