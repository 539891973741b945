"""The content store beside the snapshots (``snapshots/.store/sha256/ab/abcd...``): the
kept contents of tracked files and compile-cache archives, named by their sha256, shared by
every snapshot in the folder, written once, checked again on every read."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from envguard.errors import ActionError
from envguard.owned import own_folder

STORE_DIR = ".store"
_HEX = re.compile(r"^[0-9a-f]{64}$")
_BLOCK = 1 << 20


def store_for(snapshot_path: str | Path) -> Path:
    """The store that belongs with a snapshot file: ``.store`` in its folder."""
    return Path(snapshot_path).absolute().parent / STORE_DIR


class _Hashing:
    """A binary file object that hashes and counts what is written through it."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh, self.sha, self.size = fh, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.fh.write(data)

    def flush(self) -> None:
        self.fh.flush()


class Blobs:
    """A content-addressed folder of blobs."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path(self, sha256: str) -> Path:
        if not _HEX.match(sha256):  # a name, never a path
            raise ActionError(f"{sha256[:80]!r} is not a sha256")
        return self.root / "sha256" / sha256[:2] / sha256

    def has(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    def write(self, fill: Callable[[IO[bytes]], object]) -> tuple[str, int]:
        """Store what ``fill`` writes; (its sha256, its size). Atomic: a blob is complete or
        absent, and one already there is kept as it is."""
        # .store and its sha256/ and sha256/ab/: envguard's own, opened, never followed.
        own_folder(self.root, create=True)
        folder = own_folder(self.root / "sha256", create=True) or self.root / "sha256"
        try:
            fd, tmp = tempfile.mkstemp(prefix=".incoming-", dir=folder)
        except OSError as exc:
            raise ActionError(f"{self.root}: cannot write the store ({exc.strerror})") from None
        try:
            with os.fdopen(fd, "wb") as fh:
                hashing = _Hashing(fh)
                try:
                    fill(hashing)  # type: ignore[arg-type]  # a writable binary stream
                except OSError as exc:  # reading the content failed, not the store
                    why = f"{exc.filename or 'the content'}: {exc.strerror or exc}"
                    raise ActionError(why) from None
            sha = hashing.sha.hexdigest()
            final = self.path(sha)
            own_folder(final.parent, create=True)
            os.chmod(tmp, 0o400)  # kept content may be private: the owner reads it
            if final.is_file():
                os.unlink(tmp)
            else:
                os.replace(tmp, final)
            return sha, hashing.size
        except OSError as exc:
            raise ActionError(f"{self.root}: cannot write the store ({exc.strerror})") from None
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def add_bytes(self, data: bytes) -> str:
        return self.write(lambda fh: fh.write(data))[0]

    def verified(self, sha256: str) -> Path | str:
        """The blob's path when it is there and still hashes to its name; otherwise why not
        (a string: missing, or damaged)."""
        from envguard.reading import open_regular

        path = self.path(sha256)
        digest = hashlib.sha256()
        try:
            # A regular file, not a link, FIFO or device: a store can be tampered with.
            if path.is_symlink():
                return f"not a regular file in the store {self.root}"
            with os.fdopen(open_regular(str(path)), "rb") as fh:
                for block in iter(lambda: fh.read(_BLOCK), b""):
                    digest.update(block)
        except FileNotFoundError:
            return f"not in the store {self.root}"
        except OSError as exc:
            return f"unreadable in the store ({exc.strerror})"
        if digest.hexdigest() != sha256:
            return (
                f"damaged in the store {self.root} (its content hashes {digest.hexdigest()[:12]})"
            )
        return path
