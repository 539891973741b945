"""Which interpreter to measure: --python, $VIRTUAL_ENV, ./.venv, python3 on PATH."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from envguard.errors import UsageError


def venv_python(venv: Path) -> Path | None:
    """The interpreter of a venv directory, or None when it holds none."""
    for rel in ("bin/python", "bin/python3", "Scripts/python.exe"):
        candidate = venv / rel
        if candidate.exists():
            return candidate
    return None


def _own_venv() -> Path | None:
    """envguard's own venv (a tool install), unless it is a plain interpreter."""
    return Path(sys.prefix).resolve() if sys.prefix != sys.base_prefix else None


def resolve_python(
    python: str | None, *, environ: Mapping[str, str] | None = None, cwd: Path | None = None
) -> Path:
    """The interpreter to measure: --python, else $VIRTUAL_ENV, ./.venv, python3 on PATH."""
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    if python:
        path = Path(python).expanduser()
        if not path.is_absolute():
            path = cwd / path
        if not os.path.lexists(path):
            raise UsageError(f"--python {python}: no such file or directory")
        if path.is_dir():
            found = venv_python(path)
            if found is None:
                raise UsageError(
                    f"--python {python}: directory holds no bin/python (not a virtualenv)"
                )
            return found
        return path
    if environ.get("VIRTUAL_ENV"):
        found = venv_python(Path(environ["VIRTUAL_ENV"]))
        if found is not None:
            return found
    local = venv_python(cwd / ".venv")
    if local is not None:
        return local
    import shutil  # here: off the way to a probe whose interpreter was named

    own = _own_venv()
    for entry in environ.get("PATH", "").split(os.pathsep):
        candidate = shutil.which("python3", path=entry) if entry else None
        if candidate is None:
            continue
        # The folder, resolved; not the file: a venv's python links out to its base Python.
        if own is not None and Path(candidate).parent.resolve().is_relative_to(own):
            continue
        return Path(candidate)
    raise UsageError(
        "no Python interpreter found to measure",
        hint="pass --python PATH (an interpreter or a venv directory)",
    )
