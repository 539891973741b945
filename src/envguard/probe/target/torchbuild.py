"""torch's build facts from torch/version.py, parsed and never imported."""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import os

from .reading import Regex, read_text, report_line

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

_ASSIGN = Regex(r"(?m)^([A-Za-z_]\w*)[ \t]*(?::[^=\n]*)?=[ \t]*(.+?)[ \t]*$")
_TORCH_KEYS = ("__version__", "debug", "cuda", "git_version", "hip")


def _literal(text: str) -> Any:
    constants = {"None": None, "True": True, "False": False}
    if text in constants:
        return constants[text]
    quote = text[:1]
    simple = len(text) >= 2 and text[-1] == quote and quote not in text[1:-1]
    if quote in ("'", '"') and simple and "\\" not in text:
        return text[1:-1]
    import ast  # an unusual literal: let Python read it

    return ast.literal_eval(text)


def literal_assignments(source: str) -> Dict[str, Any]:
    """Top-level ``name = literal`` (or ``name: T = literal``) lines torch's version.py has."""
    values: Dict[str, Any] = {}
    for name, raw in assigned(source):
        if name not in values:
            try:
                values[name] = _literal(raw)
            except Exception:  # an odd version.py must not stop the snapshot
                pass
    return values


def assigned(source: str) -> List[Tuple[str, str]]:
    """The (name, text) _ASSIGN finds in ``source`` whose name is one of _TORCH_KEYS, in
    order, told by string operations: re is not loaded for it (with enum, 8 ms of a
    probe's CPU). _ASSIGN matches whole lines (only "\\n" ends one for it), and no key
    begins another."""
    found = []
    for line in source.split("\n"):
        key = next((k for k in _TORCH_KEYS if line.startswith(k)), None)
        if key is None:
            continue
        # (a longer name, "cuda_x", is left by the checks below: no blank, ":" or "=" is \\w)
        rest = line[len(key) :].lstrip(" \t")
        if rest[:1] == ":":  # an annotation: up to the first "="
            rest = rest[rest.find("=") :] if "=" in rest else ""
        if rest[:1] != "=":
            continue
        rest = rest[1:]
        text = rest.lstrip(" \t").rstrip(" \t")
        if text:
            found.append((key, text))
        elif rest:  # only blanks: the lazy group takes the last of them
            found.append((key, rest[-1]))
    return found


def torch_build(packages: List[Dict[str, Any]], warnings: List[str]) -> Optional[Dict[str, Any]]:
    """version, cuda, git_version, hip and debug of the torch the interpreter imports."""
    torch = next((p for p in packages if p["name"] == "torch" and not p["shadowed"]), None)
    if torch is None:
        return None
    path = os.path.join(torch["location"], "torch", "version.py")
    source = read_text(path)
    values: Dict[str, Any] = {}
    if source is None:
        warnings.append("%s: missing; torch build details unknown" % path)
    else:
        values = literal_assignments(source)
        if "__version__" not in values:
            warnings.append("%s: no __version__; torch build details unknown" % path)

    def text(key: str) -> Optional[str]:
        # A string of any length or character may be written there: one line, escaped,
        # or left out when it is no version (over 256 characters).
        value = values.get(key)
        if value is None:
            return None
        line = report_line(str(value), 256)
        if line is None:
            warnings.append("%s: %s is over 256 characters; left out" % (path, key))
        return line

    debug = values.get("debug")
    return {
        "version": text("__version__") or torch["version"],
        "cuda": text("cuda"),
        "git_version": text("git_version"),
        "hip": text("hip"),
        "debug": debug if isinstance(debug, bool) else None,
    }
