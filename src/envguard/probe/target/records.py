"""The rows of a RECORD the installed-files check reads (installed.py), parsed from its
text (or taken from the distribution cache, which keeps what this parse made under
RECORD's stamp and a checksum). Only rows that plainly stay inside site-packages and are
one line of text are kept."""

# ruff: noqa: UP006, UP035
from __future__ import annotations

import os
import posixpath

from .reading import UNSAFE_CHARS, Regex

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Tuple

# Names read in a folder to tell whether it is a package (package_folder).
_MAX_ENTRIES = 100000
# Suffixes of the files that run: what the quick check stats. Beside Python's and the
# loader's: LLVM bitcode linked into every GPU kernel (triton's libdevice.10.bc, NCCL's
# device library) and C sources compiled at run time (triton's driver.c).
_RUNS = (".py", ".so", ".pth", ".pyd", ".dylib", ".pyc", ".bc", ".c")
_SO_VERSIONED = Regex(r"\.so(\.[0-9]+)+$")
# RECORD rows with a hash and a size whose path does not start with "/", "./" or "../"
# (console scripts in ../../../bin are not site-packages' files), at C speed.
_ROW = Regex(r"(?m)^(?!\.\.?/)([^\",\r\n/\\][^,\r\n\\]*),([^,\r\n]+),([0-9]+)\r?$")
# A path that is not one line of text (a control or bidi character, a NUL, bytes that are not
# UTF-8): a report carrying it would be refused whole, and os.lstat() refuses a NUL.
_NOT_LINE = Regex("[" + UNSAFE_CHARS + "\ud800-\udfff]")


def runs(path: str) -> bool:
    """A file the interpreter or the loader executes, or one a package runs (a program in
    a bin/ folder of its own: triton's ptxas compiles every kernel): what the quick check
    looks at."""
    return path.endswith(_RUNS) or "/bin/" in path or bool(_SO_VERSIONED.search(path))


def plain(joined: str) -> bool:
    """Paths (joined by newlines) that plainly stay inside site-packages: no "/." (nor
    "..") inside, no "//", no backslash, none absolute."""
    return not ("/." in joined or "//" in joined or "\\" in joined or "\n/" in joined) and (
        not joined.startswith("/")
    )


def parse_rows(text: str, deep: bool) -> Tuple[List[Tuple[str, str, str]], int, int]:
    """(path, hash, size) of the rows to check, how many rows lead out of site-packages,
    and how many cannot be read as one (not one line of text, or not CSV)."""
    rows = _ROW.findall(text)
    if not deep:
        rows = [
            r
            for r in rows
            if r[0].endswith(_RUNS) or (("/bin/" in r[0] or ".so." in r[0]) and runs(r[0]))
        ]
    if (
        '"' not in text
        and "\n/" not in text
        and plain("\n".join(r[0] for r in rows))
        and not _NOT_LINE.search("".join(r[0] for r in rows))
    ):
        return rows, 0, 0
    import csv

    rows = []
    escaped = unreadable = 0
    reader = csv.reader(text.splitlines(True))
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error:  # a field over csv's limit; a NUL (before Python 3.11)
            unreadable += 1
            continue
        if len(row) != 3 or not row[1] or not row[2].isdigit():
            continue
        path = row[0]
        if _NOT_LINE.search(path):
            unreadable += 1
            continue
        if "\\" in path or "./" in path or "//" in path or path.startswith("/"):
            if path.startswith("../"):  # ../../../bin/x: a console script
                continue
            path = posixpath.normpath(path.replace("\\", "/"))
            if path.startswith(("../", "/")) or path in ("..", "."):
                escaped += 1
                continue
        if deep or runs(path):
            rows.append((path, row[1], row[2]))
    return rows, escaped, unreadable


def package_folder(path: str, name: str) -> bool:
    """``path`` (named ``name``) is a folder import enters as a package: a name import can
    reach, and an ``__init__.py`` (or its sourceless ``.pyc``) or (a namespace package) a
    module or extension in it."""
    if not name.isidentifier() or name == "__pycache__":
        return False
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return any(n.endswith((".py", ".so", ".pyc")) for n in names[:_MAX_ENTRIES])
