"""The stamps a kept ``__pycache__`` folder's verdict is tied to (loaded.py): the paths of
its pycs and their sources, their ``lstat``, and one digest of them, told a batch of
folders at a time at C speed."""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import os
from operator import attrgetter, mul

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

# What a folder's digest is made of, read at C speed: each pyc's ctime (a write in place,
# a chmod, a new link: any change to it moves it, and it cannot be put back; a pyc added,
# removed or renamed changes the folder's own stamp), and each source's inode, size, mtime
# and, when it has one link, ctime (uv links sources from its cache: every venv linked to
# one moves its ctime; Python compares a pyc's header with the source's mtime and size).
INO, SIZE, NLINK = attrgetter("st_ino"), attrgetter("st_size"), attrgetter("st_nlink")
CTIME, MTIME = attrgetter("st_ctime_ns"), attrgetter("st_mtime_ns")
ONE = (1).__eq__


def pyc_paths(names: str, lead: str, tag: str) -> Tuple[List[str], List[str]]:
    """The paths of a kept folder's pycs (``names``, joined by newlines) and of their
    sources, in the folder ``lead`` (its path and a "/", or ""): made by a few string
    operations on the whole text when every name is this interpreter's plain pyc (the
    common case), else name by name."""
    if not names:
        return [], []
    prefix = lead + "__pycache__/"
    rels = (prefix + names.replace("\n", "\n" + prefix)).split("\n")
    ending = "." + tag + ".pyc"
    if (names + "\n").count(ending + "\n") == len(rels) == names.count(ending) and (
        names.count(".") == len(rels) * ending.count(".")  # no stem holds a dot
    ):
        plain = names.replace(ending, ".py")
        return rels, (lead + plain.replace("\n", "\n" + lead)).split("\n")
    return rels, [lead + name.partition(".")[0] + ".py" for name in names.split("\n")]


def batch_paths(
    folders: List[Tuple[str, str]], tag: str
) -> Optional[Tuple[List[str], List[str], List[str]]]:
    """pyc_paths() of a batch of kept folders (``folders``: their names and ``lead``) at
    once, when every name is this interpreter's plain pyc (one check of the whole batch,
    one split of its paths): each folder's pyc paths joined by newlines ("" for none), then
    the paths of every pyc and of every source, folder after folder; else None."""
    ending = "." + tag + ".pyc"
    whole = "\n".join([names for names, _ in folders if names])
    count = whole.count("\n") + 1 if whole else 0
    if not (
        (whole + "\n").count(ending + "\n") == count == whole.count(ending)
        and whole.count(".") == count * ending.count(".")
    ):
        return None
    texts: List[str] = []
    plain: List[str] = []
    for names, lead in folders:
        if not names:
            texts.append("")
            continue
        prefix = lead + "__pycache__/"
        texts.append(prefix + names.replace("\n", "\n" + prefix))
        plain.append(lead + names.replace(ending, ".py").replace("\n", "\n" + lead))
    if not plain:
        return texts, [], []
    return texts, "\n".join(filter(None, texts)).split("\n"), "\n".join(plain).split("\n")


def take_stamps(
    base: str, rels: List[str], sources: List[str], stats_of: Dict[str, os.stat_result]
) -> Optional[Tuple[List[os.stat_result], List[Any]]]:
    """The ``lstat`` of the pycs at ``rels`` and of their ``sources`` (relative to the
    site, ``base`` its path and a "/", or "" in it; those the RECORD check took,
    ``stats_of``, else taken here; a missing source counts as zeros: such a pyc is never
    loaded); None when a pyc cannot be stat'ed."""
    try:
        pycs = list(map(os.lstat, map(base.__add__, rels) if base else rels))
    except OSError:
        return None
    found = list(map(stats_of.get, sources))
    if None in found:
        for i, st in enumerate(found):
            if st is None:
                try:
                    found[i] = os.lstat(base + sources[i])
                except OSError:
                    found[i] = _NO_SOURCE
    return pycs, found


def stamp_columns(pycs: List[os.stat_result], sources: List[Any]) -> Optional[List[Any]]:
    """What a folder's digest is made of (see INO), a column a field, as arrays of 64-bit
    numbers; None when one does not fit (an inode or a time past 63 bits: no verdict)."""
    from array import array

    try:
        return [
            array("q", map(CTIME, pycs)),
            array("q", map(INO, sources)),
            array("q", map(SIZE, sources)),
            array("q", map(MTIME, sources)),
            array("q", map(mul, map(CTIME, sources), map(ONE, map(NLINK, sources)))),
        ]
    except OverflowError:
        return None


def folder_digest(rels: List[str], columns: List[Any], at: int = 0) -> str:
    """One digest of the stamps of the pycs at ``rels`` and of their sources: rows ``at``
    to ``at + len(rels)`` of ``columns`` (stamp_columns()), each column's in turn."""
    return text_digest("\n".join(rels), len(rels), columns, at)


def text_digest(text: str, count: int, columns: List[Any], at: int = 0) -> str:
    """folder_digest() of the ``count`` pycs whose paths ``text`` holds, joined by
    newlines."""
    end = at + count
    values = b"".join([column[at:end].tobytes() for column in columns])
    return str(
        _blake2b(
            values + b"\0" + text.encode("utf-8", "surrogateescape"), digest_size=16
        ).hexdigest()
    )


class _NoSource:
    """The stamp of a source that is not there."""

    st_ino = st_size = st_mtime_ns = st_ctime_ns = st_nlink = 0


_NO_SOURCE: Any = _NoSource()


def _blake2b(data: bytes, digest_size: int) -> Any:
    if not _BLAKE2B:
        try:
            from _blake2 import blake2b  # hashlib loads OpenSSL first: ~7 ms at every probe
        except ImportError:
            from hashlib import blake2b
        _BLAKE2B.append(blake2b)
    return _BLAKE2B[0](data, digest_size=digest_size)


_BLAKE2B: List[Any] = []
