"""Pinned requirements.txt: `name==version`, `name @ url`, `-e path`, `-r other.txt`.

A requirements file may come from a pull request: `-r` follows only files under the top
file's folder, the working directory or its git work tree, and no error quotes a line.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import VERSION_PATTERN

from envguard.compare.lockfiles.common import LockfileError, Pin, read_lockfile_text, reason

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_MAX_INCLUDE_DEPTH = 10
# -r FILE, -rFILE, --requirement FILE, --requirement=FILE (and the same for -c, --constraint)
_INCLUDE = re.compile(
    r"^(?:-(?P<short>[rc])\s*|--(?P<long>requirement|constraint)(?:\s*=\s*|\s+))(?P<file>\S.*)$"
)


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


def allowed_roots(path: Path, cwd: Path | None = None) -> tuple[str, ...]:
    """Where `-r` may lead: the top file's folder, the working directory, its work tree."""
    from envguard.snapshots.repos import find_work_tree

    cwd = Path.cwd() if cwd is None else cwd
    roots = {os.path.realpath(path.parent), os.path.realpath(cwd)}
    top = find_work_tree(cwd)
    if top is not None:
        roots.add(os.path.realpath(top))
    return tuple(sorted(roots))


# `name==version` with a PEP 508 name and a PEP 440 version: what packaging parses to one ==
# specifier, at a fraction of the cost (a 200,000-line file in well under a second).
_PLAIN_PIN = re.compile(
    r"([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*==\s*(" + VERSION_PATTERN + r")\Z",
    re.VERBOSE | re.IGNORECASE,
)


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def read_requirements(
    path: Path,
    env: dict[str, str],
    *,
    roots: tuple[str, ...] | None = None,
    _depth: int = 0,
) -> dict[str, Pin]:
    """A pinned requirements.txt: `name==version`, `name @ url`, `-e path`, `-r other.txt`."""
    roots = allowed_roots(path) if roots is None else roots
    text = read_lockfile_text(path)
    pins: dict[str, Pin] = {}
    for number, line in _logical_lines(text):
        where = f"{path}:{number}"
        include = _INCLUDE.match(line)
        if include:
            if (include.group("short") or include.group("long") or "")[0] == "c":
                continue  # constraints narrow versions; they install nothing
            pins.update(_include(path, include.group("file").strip(), env, roots, where, _depth))
            continue
        if line.startswith(("-e ", "--editable ", "--editable=")):
            target = re.split(r"[\s=]", line, maxsplit=1)[1].strip()
            local = Path(target.removeprefix("file://"))
            full = (path.parent / local).resolve()
            name = _editable_name(full, roots)
            pins[name or str(full)] = Pin(name=name or str(full), editable=str(full))
            continue
        if line.startswith("-"):
            continue  # --index-url, --find-links, --hash-only lines: not pins
        requirement_text = re.split(r"\s--hash[=\s]", line)[0].strip()
        plain = _PLAIN_PIN.match(requirement_text)
        if plain:  # name==version, most lines of a compiled file: no full parse needed
            name = canonicalize_name(plain.group(1))
            pins[name] = Pin(name=name, version=plain.group(2).strip())
            continue
        try:
            req = Requirement(requirement_text)
        except InvalidRequirement as exc:
            raise LockfileError(f"{where}: not a valid requirement ({reason(exc)})") from None
        try:
            if req.marker is not None and not req.marker.evaluate(env):
                continue
        except ValueError as exc:
            raise LockfileError(
                f"{where}: a marker envguard cannot evaluate ({reason(exc)})"
            ) from None
        name = canonicalize_name(req.name)
        specs = list(req.specifier)
        if req.url:
            pins[name] = Pin(name=name, url=req.url)
        elif len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
            pins[name] = Pin(name=name, version=specs[0].version)
        else:
            pins[name] = Pin(name=name, specifier=str(req.specifier) or None)
    return pins


def _include(
    path: Path, target: str, env: dict[str, str], roots: tuple[str, ...], where: str, depth: int
) -> dict[str, Pin]:
    if depth >= _MAX_INCLUDE_DEPTH:
        raise LockfileError(f"{where}: -r nested more than {_MAX_INCLUDE_DEPTH} deep")
    full = os.path.realpath(path.parent / target)
    if not _inside(full, roots):
        raise LockfileError(
            f"{where}: -r leads outside the project; only files under {', '.join(roots)}"
            " are followed"
        )
    return read_requirements(Path(full), env, roots=roots, _depth=depth + 1)


def _editable_name(folder: Path, roots: tuple[str, ...]) -> str | None:
    pyproject = folder / "pyproject.toml"
    if not _inside(os.path.realpath(pyproject), roots):
        return None
    try:
        name = tomllib.loads(read_lockfile_text(pyproject)).get("project", {}).get("name")
    except (LockfileError, tomllib.TOMLDecodeError, RecursionError):
        return None
    return canonicalize_name(name) if isinstance(name, str) else None
