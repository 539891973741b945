"""Requirements files as pip and uv read them (and the PIP_* variables that name them),
for what the guard must see before the dry run does: the files a line includes (``-r`` and
``-c`` in every spelling: ``-r FILE``, ``-rFILE``, ``--requirement=FILE``, an abbreviation
optparse accepts, a ``${VAR}`` pip expands) and the requirements that name a source to
build rather than a wheel.

pip reads a file line by line: continuation lines joined, comments dropped, ``${NAME}``
expanded from the environment, then the line split as shell words. Every word that is one
of these options is read as one, wherever it stands on the line (pip follows only those on
a line without a requirement; checking more is safe)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

_COMMENT = re.compile(r"(^|\s+)#.*$")
_VARIABLE = re.compile(r"\$\{([A-Z0-9_]+)\}")
# Short options that take the rest of the word, or the next one, as their value.
_SHORT_INCLUDES = "rc"
_SHORT_VALUES = "eif"
_EDITABLE = ("-e", "--editable")


@dataclass(frozen=True)
class ReadLines:
    """What a requirements file names: files it includes, sources that would be built."""

    includes: tuple[str, ...] = ()
    builds: tuple[str, ...] = ()


def pip_name(variable: str) -> str:
    """The option a ``PIP_*`` variable sets, by pip's rule (any case after the prefix, ``_``
    for ``-``, a leading ``--`` dropped): ``PIP___TARGET`` and ``PIP_target`` are both
    ``target``, ``PIP_requirement`` is ``requirement``."""
    name = variable[4:].lower().replace("_", "-")
    return name[2:] if name.startswith("--") else name


def is_include(option: str) -> bool:
    """``option`` (a long option, without its ``=value``) is one pip or uv reads as
    --requirement or --constraint: spelled out, in the plural uv takes, or abbreviated as
    optparse allows (``--requir``)."""
    if not option.startswith("--") or len(option) < 3:
        return False
    word = option[2:]
    return any(full.startswith(word) for full in ("requirements", "constraints"))


def logical_lines(text: str, env: Mapping[str, str]) -> list[str]:
    """The lines pip parses: continuations joined, comments dropped, ``${NAME}`` expanded."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        if raw.endswith("\\"):
            pending += raw[:-1]
            continue
        line = _COMMENT.sub("", pending + raw)
        pending = ""
        lines.append(_VARIABLE.sub(lambda m: env.get(m.group(1), m.group(0)), line))
    if pending:
        lines.append(_COMMENT.sub("", pending))
    return [ln for ln in lines if ln.strip()]


def read_lines(text: str, env: Mapping[str, str]) -> ReadLines:
    """The includes and the sources to build a requirements file's ``text`` names."""
    includes: list[str] = []
    builds: list[str] = []
    for line in logical_lines(text, env):
        try:
            words = shlex.split(line)
        except ValueError:
            words = line.split()
        includes += option_values(words)
        builds += build_sources(words)
    return ReadLines(includes=tuple(includes), builds=tuple(builds))


def option_values(words: list[str]) -> list[str]:
    """The files ``words`` include with -r/-c, in every spelling."""
    found: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("--"):
            option, eq, value = word.partition("=")
            if is_include(option):
                if not eq and i + 1 < len(words):
                    i += 1
                    value = words[i]
                found.append(value)
        elif word.startswith("-") and len(word) > 1:
            for k, letter in enumerate(word[1:], start=2):
                if letter in _SHORT_INCLUDES:
                    # `-r=FILE`: optparse keeps the "=", uv does not; the file is uv's.
                    value = word[k:].removeprefix("=")
                    if not value and i + 1 < len(words):
                        i += 1
                        value = words[i]
                    found.append(value)
                    break
                if letter in _SHORT_VALUES:
                    break
        i += 1
    return [v for v in found if v]


def build_sources(words: list[str]) -> list[str]:
    """The sources on a line that pip would build (run a build backend on) to read their
    metadata: an editable, a local folder or archive, a VCS or archive URL; a wheel is not
    built."""
    if not words:
        return []
    if words[0] in _EDITABLE or words[0].startswith("--editable="):
        return [" ".join(words)]
    if words[0].startswith("-"):
        return []
    # The requirement is what comes before the line's first option (pip's rule).
    end = next((i for i, w in enumerate(words) if w.startswith("-")), len(words))
    head = " ".join(words[:end])
    return [head] if needs_build(head) else []


def needs_build(requirement: str) -> bool:
    """``requirement`` (a requirement line or a command's argument) names a source, not an
    index name or a wheel: installing it runs its build backend."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        url = Requirement(requirement).url
    except InvalidRequirement:
        url = requirement.strip()  # a path or a URL
    if url is None:
        return False
    return not url.split("#", 1)[0].split("?", 1)[0].endswith(".whl")
