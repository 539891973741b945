"""Pinned requirements.txt: `name==version`, `name @ url`, `-e path`, `-r other.txt`."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envguard.compare.lockfiles.common import LockfileError, Pin

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _logical_lines(text: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    buffer, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if not buffer:
            start = number
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        buffer += line
        if buffer.strip():
            out.append((start, buffer.strip()))
        buffer = ""
    if buffer.strip():
        out.append((start, buffer.strip()))
    return out


def read_requirements(path: Path, env: dict[str, str], *, _depth: int = 0) -> dict[str, Pin]:
    """A pinned requirements.txt: `name==version`, `name @ url`, `-e path`, `-r other.txt`."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LockfileError(f"{path}: cannot read ({exc.strerror})") from None
    pins: dict[str, Pin] = {}
    for number, line in _logical_lines(text):
        where = f"{path}:{number}"
        if line.startswith(("-r ", "--requirement ")) and _depth < 10:
            pins.update(
                read_requirements(path.parent / line.split(None, 1)[1], env, _depth=_depth + 1)
            )
            continue
        if line.startswith(("-e ", "--editable ")):
            target = line.split(None, 1)[1].strip()
            local = Path(target.removeprefix("file://"))
            full = (path.parent / local).resolve()
            name = _editable_name(full)
            pins[name or str(full)] = Pin(name=name or str(full), editable=str(full))
            continue
        if line.startswith("-"):
            continue  # --index-url, --hash-only lines, -c: not pins
        requirement_text = re.split(r"\s--hash[=\s]", line)[0].strip()
        try:
            req = Requirement(requirement_text)
        except InvalidRequirement as exc:
            raise LockfileError(
                f"{where}: invalid requirement {requirement_text!r} ({exc})"
            ) from None
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        name = canonicalize_name(req.name)
        specs = list(req.specifier)
        if req.url:
            pins[name] = Pin(name=name, url=req.url)
        elif len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
            pins[name] = Pin(name=name, version=specs[0].version)
        else:
            pins[name] = Pin(name=name, specifier=str(req.specifier) or None)
    return pins


def _editable_name(folder: Path) -> str | None:
    pyproject = folder / "pyproject.toml"
    if pyproject.is_file():
        try:
            name = (
                tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("name")
            )
        except (OSError, tomllib.TOMLDecodeError):
            return None
        return canonicalize_name(name) if isinstance(name, str) else None
    return None
