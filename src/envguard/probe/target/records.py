"""The rows of a RECORD the installed-files check reads (installed.py): parsed from its
text, or taken from the distribution cache when they are what a parse could have made.
Only rows that plainly stay inside site-packages and are one line of text are kept."""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import posixpath

from .reading import UNSAFE_CHARS, Regex

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Optional, Tuple

# Suffixes of the files that run: what the quick check stats.
_RUNS = (".py", ".so", ".pth", ".pyd", ".dylib", ".pyc")
_SO_VERSIONED = Regex(r"\.so(\.[0-9]+)+$")
# RECORD rows with a hash and a size whose path does not start with "/", "./" or "../"
# (console scripts in ../../../bin are not site-packages' files), at C speed.
_ROW = Regex(r"(?m)^(?!\.\.?/)([^\",\r\n/\\][^,\r\n\\]*),([^,\r\n]+),([0-9]+)\r?$")
# A path that is not one line of text (a control or bidi character, a NUL, bytes that are not
# UTF-8): a report carrying it would be refused whole, and os.lstat() refuses a NUL.
_NOT_LINE = Regex("[" + UNSAFE_CHARS + "\ud800-\udfff]")
# The same but for the newline, and the control characters ASCII text may hold: paths
# joined by newlines are checked at once, a pure-ASCII text by one search for each.
_NOT_LINE_BUT_NEWLINE = Regex(
    "[" + UNSAFE_CHARS.replace("\x00-\x1f", "\x00-\t\x0b-\x1f") + "\ud800-\udfff]"
)
_ASCII_CONTROLS = tuple(chr(c) for c in [*range(10), *range(11, 32), 127])


def runs(path: str) -> bool:
    """A file the interpreter or the loader executes: what the quick check looks at."""
    return path.endswith(_RUNS) or bool(_SO_VERSIONED.search(path))


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
        rows = [r for r in rows if r[0].endswith(_RUNS) or (".so." in r[0] and runs(r[0]))]
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


def _lines(joined: str) -> bool:
    """Whether the paths ``joined`` by newlines are each one line of text (no character
    _NOT_LINE refuses), at C speed: a search for each control character in ASCII text (the
    common case, told in constant time), else one regular expression."""
    if joined.isascii():
        return not any(map(joined.__contains__, _ASCII_CONTROLS))
    return _NOT_LINE_BUT_NEWLINE.search(joined) is None


def held_paths(held: List[str]) -> Optional[List[str]]:
    """The paths of kept rows, when the rows are what parse_rows() could have made (a cache
    edited by hand is read again rather than trusted): as many paths, sizes and hashes,
    none empty, every size a number. Told on the joined texts, at C speed."""
    text, sizes, hashes = held
    if text == "":
        return [] if sizes == hashes == "" else None
    if not sizes or not hashes:
        return None  # one row with an empty size or hash
    count = text.count("\n")
    if not (count == sizes.count(",") == hashes.count("\n")) or not plain(text):
        return None
    lines = "\n" + text + "\n"  # each path between two newlines
    if "\n../" in lines or "\n..\n" in lines or "\n.\n" in lines or "\n\n" in lines:
        return None  # out of site-packages, site-packages itself, or an empty path
    if not _lines(text):
        return None  # not one line of text: what _ROW and parse_rows() never keep
    for joined, by in ((sizes, ","), (hashes, "\n")):
        if joined.startswith(by) or joined.endswith(by) or by + by in joined:
            return None  # an empty one
    if not sizes.replace(",", "").isdigit() or not sizes.isascii():
        return None
    return text.split("\n")
