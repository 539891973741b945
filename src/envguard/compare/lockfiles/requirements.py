"""Pinned requirements.txt: `name==version`, `name @ url`, `-e path`, `-r other.txt`.

A requirements file may come from a pull request: `-r` follows only files under the top
file's folder, the working directory or its git work tree, and no error quotes a line.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import VERSION_PATTERN

from envguard.compare.lockfiles.common import (
    MARKER_ERRORS,
    LockfileError,
    LockRead,
    Pin,
    allowed_roots,
    merged,
    read_lockfile_text,
    reason,
)
from envguard.toml_reading import toml_loads

_MAX_INCLUDE_DEPTH = 10
_MAX_INCLUDED_FILES = 1000
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


# `name==version` with a PEP 508 name and a PEP 440 version: what packaging parses to one ==
# specifier, at a fraction of the cost (a 200,000-line file in well under a second).
_PLAIN_PIN = re.compile(
    r"([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*==\s*(" + VERSION_PATTERN + r")\Z",
    re.VERBOSE | re.IGNORECASE,
)


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def read_requirements_lock(path: Path, env: dict[str, str] | None, *, text: str) -> LockRead:
    """A requirements file as a lock: its pins for ``env`` (None: every environment, each
    marker kept as the pin's scope), the lines whose marker is false for ``env`` aside, and
    what requires what from the ``# via`` comments that pip-compile and `uv export` write."""
    notes: list[str] = []
    aside: dict[str, Pin] = {}
    pins = read_requirements(path, env, text=text, notes=notes, aside=aside)
    return LockRead(
        pins=pins,
        notes=tuple(notes),
        aside={n: p for n, p in aside.items() if n not in pins},
        elsewhere={
            n: ("platform", " or ".join(p.scope)) for n, p in aside.items() if n not in pins
        },
        requires=via_edges(text),
    )


def via_edges(text: str) -> dict[str, frozenset[str]]:
    """Parent -> the packages it pulled in, from ``# via PARENT`` comments (one parent on the
    line, or one per following ``#   PARENT`` line); ``-r FILE`` parents are not packages."""
    edges: dict[str, set[str]] = {}
    current: str | None = None
    listing = False
    for raw in text.splitlines():
        stripped = raw.strip()
        if not raw[:1].isspace() and (start := _NAME_START.match(raw)) is not None:
            current, listing = canonicalize_name(start.group(1)), False
            continue
        if current is None or not stripped.startswith("#"):
            listing = False
            continue
        said = stripped.lstrip("#").strip()
        if said == "via":
            listing = True
            continue
        if said.startswith("via "):
            parents, listing = [said[4:].strip()], False
        elif listing:
            parents = [said]
        else:
            continue
        for parent in parents:
            first = parent.split()[0] if parent.split() else ""
            if _NAME_START.fullmatch(first):
                edges.setdefault(canonicalize_name(first), set()).add(current)
    return {parent: frozenset(children) for parent, children in edges.items()}


_NAME_START = re.compile(r"([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)(?=[\s=<>!~;@\[]|$)")


def read_requirements(
    path: Path,
    env: dict[str, str] | None,
    *,
    roots: tuple[str, ...] | None = None,
    text: str | None = None,
    notes: list[str] | None = None,
    aside: dict[str, Pin] | None = None,
    _depth: int = 0,
    _seen: set[str] | None = None,
) -> dict[str, Pin]:
    """A pinned requirements.txt in pip's syntax (``text`` when it came from stdin): pins,
    `name @ url`, `-e` paths and VCS URLs, `-r` includes, `--hash` and continuations;
    ``${VAR}`` references are kept as written (and noted); index and find-links lines are
    noted in ``notes``, not pins. A line whose marker is false for ``env`` goes to ``aside``
    (with the marker as its scope); ``env`` None keeps every line, its marker as its scope."""
    roots = allowed_roots(path) if roots is None else roots
    text = read_lockfile_text(path) if text is None else text
    notes = [] if notes is None else notes
    # Every file is read once, however many lines include it: ten files that each include
    # the next one ten times must not make 10**9 reads.
    seen = {os.path.realpath(path)} if _seen is None else _seen
    pins: dict[str, Pin] = {}
    for number, raw_line in _logical_lines(text):
        where = f"{path}:{number}"
        line = _unexpanded(raw_line, where, notes)
        include = _INCLUDE.match(line)
        if include:
            if (include.group("short") or include.group("long") or "")[0] == "c":
                continue  # constraints narrow versions; they install nothing
            target = include.group("file").strip()
            pins.update(_include(path, target, env, roots, where, _depth, notes, seen, aside))
            continue
        editable = _EDITABLE.match(line)
        if editable:
            pin = _editable(editable.group(1).strip(), path, roots, number, where)
            pins[pin.name] = pin
            continue
        if line.startswith("-"):
            option = line.split("=", 1)[0].split(None, 1)[0]
            if option in _SOURCE_OPTIONS:
                notes.append(f"{where}: {option} ignored: the gate compares what is pinned")
            continue  # --hash-only, --pre, --only-binary ...: not pins
        requirement_text = re.split(r"\s--hash[=\s]", line)[0].strip()
        plain = _PLAIN_PIN.match(requirement_text)
        if plain:  # name==version, most lines of a compiled file: no full parse needed
            name = canonicalize_name(plain.group(1))
            pins[name] = Pin(name=name, version=plain.group(2).strip(), line=number)
            continue
        try:
            req = Requirement(requirement_text)
        except InvalidRequirement as exc:
            variable = _VARIABLE.search(requirement_text)
            if variable:
                raise LockfileError(
                    f"{where}: {variable.group(0)} is not expanded: envguard compares"
                    " lockfiles as written",
                    hint="pin the value itself, or expand the file before the check (envsubst)",
                ) from None
            raise LockfileError(f"{where}: not a valid requirement ({reason(exc)})") from None
        try:
            here = req.marker is None or env is None or req.marker.evaluate(env)
        except MARKER_ERRORS as exc:
            raise LockfileError(
                f"{where}: a marker envguard cannot evaluate ({reason(exc)})"
            ) from None
        name = canonicalize_name(req.name)
        specs = list(req.specifier)
        scope = () if req.marker is None else (str(req.marker),)
        if req.url:
            pin = Pin(name=name, url=req.url, line=number, scope=scope)
        elif len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
            pin = Pin(name=name, version=specs[0].version, line=number, scope=scope)
        else:
            pin = Pin(name=name, specifier=str(req.specifier) or None, line=number, scope=scope)
        if here:
            pins[name] = merged(pins.get(name), pin) if env is None else pin
        elif aside is not None:
            aside[name] = merged(aside.get(name), pin)
    return pins


# -e PATH_OR_URL, --editable PATH_OR_URL, --editable=PATH_OR_URL
_EDITABLE = re.compile(r"^(?:-e\s*|--editable(?:\s*=\s*|\s+))(\S.*)$")
# Where packages come from, not which: pip reads them, a comparison of pins has no use.
_SOURCE_OPTIONS = frozenset(
    ("-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--no-index", "--trusted-host")
)
# pip replaces ${NAME} (upper-case letters, digits, underscores) with the variable when set.
# envguard compares a lockfile as written and never expands one: the file may come from a pull
# request and its pins are printed, so `${SLACK_WEBHOOK}` in a URL would print the CI's secret
# whatever the variable's name; and a gate's verdict must not depend on who runs it.
_VARIABLE = re.compile(r"\$\{([A-Z0-9_]+)\}")


def _unexpanded(line: str, where: str, notes: list[str]) -> str:
    """Note each ``${NAME}`` of ``line``; the line itself is kept as written."""
    if "${" in line:
        for name in dict.fromkeys(_VARIABLE.findall(line)):
            notes.append(f"{where}: ${{{name}}} kept as written: envguard expands no variables")
    return line


def _editable(target: str, path: Path, roots: tuple[str, ...], number: int, where: str) -> Pin:
    """`-e DIR` (named from its pyproject.toml when it can be read) or `-e VCS_URL#egg=NAME`."""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*\+[A-Za-z]+://", target):  # git+https://...
        fragment = dict(
            part.split("=", 1) for part in target.partition("#")[2].split("&") if "=" in part
        )
        egg = fragment.get("egg", "")
        if not re.fullmatch(r"[A-Za-z0-9._-]+", egg):
            raise LockfileError(f"{where}: an editable VCS URL needs #egg=NAME")
        return Pin(name=canonicalize_name(egg), url=target.partition("#")[0], line=number)
    local = Path(target.removeprefix("file://"))
    full = (path.parent / local).resolve()
    name = _editable_name(full, roots)
    return Pin(name=name or str(full), editable=str(full), line=number)


def _include(
    path: Path,
    target: str,
    env: dict[str, str] | None,
    roots: tuple[str, ...],
    where: str,
    depth: int,
    notes: list[str],
    seen: set[str],
    aside: dict[str, Pin] | None,
) -> dict[str, Pin]:
    if depth >= _MAX_INCLUDE_DEPTH:
        raise LockfileError(f"{where}: -r nested more than {_MAX_INCLUDE_DEPTH} deep")
    if "\0" in target:
        raise LockfileError(f"{where}: -r names no file (a NUL byte)")
    full = os.path.realpath(path.parent / target)
    if not _inside(full, roots):
        raise LockfileError(
            f"{where}: -r leads outside the project; only files under {', '.join(roots)}"
            " are followed"
        )
    if full in seen:
        return {}  # its pins are in already
    if len(seen) >= _MAX_INCLUDED_FILES:
        raise LockfileError(f"{where}: -r includes more than {_MAX_INCLUDED_FILES} files")
    seen.add(full)
    return read_requirements(
        Path(full), env, roots=roots, notes=notes, aside=aside, _depth=depth + 1, _seen=seen
    )


def _editable_name(folder: Path, roots: tuple[str, ...]) -> str | None:
    pyproject = folder / "pyproject.toml"
    if not _inside(os.path.realpath(pyproject), roots):
        return None
    try:
        name = toml_loads(read_lockfile_text(pyproject)).get("project", {}).get("name")
    except (LockfileError, ValueError, RecursionError):  # TOMLDecodeError is a ValueError
        return None
    return canonicalize_name(name) if isinstance(name, str) else None
