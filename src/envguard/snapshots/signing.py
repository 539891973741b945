"""Snapshots written here, told apart from copies by a key, not by fields a forger copies.

A snapshot's host and user are strings anyone can copy from a log, and a forged file in a
pull request's checkout is owned by the CI runner's user, so neither says "written here".
A key does: on first use envguard makes 32 random bytes in the user's config folder
(``$XDG_CONFIG_HOME/envguard/snapshot.key``, else ``~/.config/envguard``; on macOS
``~/Library/Application Support/envguard``), mode 0600, and every snapshot it writes
carries ``signature``: an HMAC-SHA256 under that key of the snapshot's canonical bytes
(its JSON data without ``signature``, keys sorted, no spaces, ASCII). A snapshot whose
signature checks under this user's key was written by this user's envguard and not
changed since: restore sets its code-loading variables as written (recovery/review.py).

The key is never used from inside the git work tree around the working directory (a
checkout could carry one, with ``XDG_CONFIG_HOME`` pointed at it), never through a link,
and not when another user owns it or could read it. A key that cannot be used signs nothing and
trusts nothing: every snapshot is then held to the review rule, as before signing.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from _operator import _compare_digest  # hmac's, without loading OpenSSL for it
from dataclasses import dataclass
from pathlib import Path

from envguard.confine import work_tree
from envguard.errors import UsageError
from envguard.owned import own_folder
from envguard.reading import not_json_constant, read_open

TYPE_CHECKING = False  # typing is not loaded for a command's start

if TYPE_CHECKING:
    from typing import Any

    from envguard.snapshots.document import Document
    from envguard.snapshots.models import Snapshot

FIELD = "signature"
KEY_NAME = "snapshot.key"
_SCHEME = "hmac-sha256"
_KEY_BYTES = 32


@dataclass(frozen=True)
class Trust:
    """Whether a snapshot was signed here (``signed``), and why not in words."""

    signed: bool
    why: str


UNSIGNED = Trust(False, "not signed by this user's envguard")


def config_folder() -> Path | None:
    """envguard's folder in the user's config folder (not made here); None without a home."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(base):
        home = os.path.expanduser("~")
        if not os.path.isabs(home):
            return None
        sub = "Library/Application Support" if sys.platform == "darwin" else ".config"
        base = os.path.join(home, sub)
    return Path(base) / "envguard"


def key_path() -> tuple[Path | None, str]:
    """Where the key is, or None and why it is not used there."""
    folder = config_folder()
    if folder is None:
        return None, "no home folder to keep a signing key in"
    # A checkout could carry a key, with XDG_CONFIG_HOME pointed into it (a CI step that
    # sets it to the workspace); a home folder kept in git (dotfiles) is the user's own.
    real = os.path.realpath(folder)
    top = work_tree(os.getcwd())
    inside = top is not None and (real == top or real.startswith(top.rstrip("/") + "/"))
    if inside and top != os.path.realpath(os.path.expanduser("~")):
        return None, f"the signing key's folder {folder} lies in the git work tree; not used"
    return folder / KEY_NAME, ""


def _load(path: Path) -> tuple[bytes | None, str]:
    """The key at ``path`` (None, why: absent, a link, not this user's or readable by
    others, damaged)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None, "no signing key on this machine yet"
    except OSError as exc:
        return None, f"the signing key {path} cannot be read ({exc.strerror or exc})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, f"the signing key {path} is not a regular file"
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            return None, f"the signing key {path} is another user's or others can read it"
        text = read_open(fd, 4096, str(path)).decode("ascii", "replace").strip()
    except OSError as exc:
        return None, f"the signing key {path} cannot be read ({exc.strerror or exc})"
    finally:
        os.close(fd)
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != _KEY_BYTES:
        return None, f"the signing key {path} is damaged"
    return key, ""


def _key(*, create: bool) -> tuple[bytes | None, str]:
    path, why = key_path()
    if path is None:
        return None, why
    key, why = _load(path)
    if key is not None or not create or os.path.lexists(path):
        return key, why
    try:
        path.parent.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # may be a link
        folder = own_folder(path.parent, create=True)
        assert folder is not None
        os.chmod(folder, 0o700)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        return _load(path)  # made by another envguard meanwhile
    except (OSError, UsageError) as exc:
        message = exc.message if isinstance(exc, UsageError) else exc.strerror or str(exc)
        return None, f"no signing key could be made ({message})"
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        # os.urandom is what secrets.token_hex reads; importing secrets loads random too
        fh.write(os.urandom(_KEY_BYTES).hex() + "\n")
    return _load(path)


def canonical(data: dict[str, Any]) -> bytes:
    """The bytes a signature covers: the snapshot's JSON data without its signature."""
    body = {k: v for k, v in data.items() if k != FIELD}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return text.encode("ascii")


# SHA-256 by CPython's own implementation where it has one: hashlib (and hmac, which
# imports it) loads OpenSSL first, 3 ms of CPU of every `envguard snapshot` while its probe
# needs both cores, for a hash of a few hundred KB that the built-in makes in well under a
# millisecond. Imported with this module, which a snapshot loads beside its probe.
try:
    from _sha2 import sha256 as _sha256  # type: ignore[import-not-found]  # Python 3.12+
except ImportError:
    try:
        from _sha256 import sha256 as _sha256  # type: ignore[import-not-found,no-redef,unused-ignore]
    except ImportError:  # a build without CPython's own hashes
        from hashlib import sha256 as _sha256  # type: ignore[assignment,unused-ignore]

_BLOCK = 64  # SHA-256's block size, HMAC's key length (RFC 2104)
_INNER = bytes(x ^ 0x36 for x in range(256))
_OUTER = bytes(x ^ 0x5C for x in range(256))


def _key_id(key: bytes) -> str:
    return str(_sha256(b"envguard snapshot key id\0" + key).hexdigest()[:16])


def _mac(key: bytes, data: dict[str, Any]) -> str:
    """HMAC-SHA256 (RFC 2104, as hmac.new(key, ..., "sha256") computes it) of the
    snapshot's canonical bytes."""
    if len(key) > _BLOCK:
        key = _sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    inner = _sha256(key.translate(_INNER))
    inner.update(canonical(data))
    outer = _sha256(key.translate(_OUTER))
    outer.update(inner.digest())
    return str(outer.hexdigest())


def signed(snapshot: Snapshot | Document) -> Document:
    """``snapshot`` as its file will hold it, signed with this user's key (made on first
    use); unsigned (``signature`` null) when no key can be used."""
    data = dict(snapshot) if isinstance(snapshot, dict) else snapshot.model_dump(mode="json")
    data[FIELD] = None
    key, _ = _key(create=True)
    if key is not None:
        data[FIELD] = f"{_SCHEME}:{_key_id(key)}:{_mac(key, data)}"
    return data


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a key is given twice")
    return dict(pairs)


def trust(text: str) -> Trust:
    """Whether the snapshot file ``text`` was signed with this user's key and not changed
    since. A key given twice anywhere is a forgery's tool (two parsers, two answers)."""
    try:
        data = json.loads(text, parse_constant=not_json_constant, object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError):
        return Trust(False, "not signed: not plain JSON (a key given twice?)")
    given = data.get(FIELD) if isinstance(data, dict) else None
    if not isinstance(given, str) or not given:
        return Trust(False, "not signed by this user's envguard (no signature)")
    scheme, _, rest = given.partition(":")
    key_id, _, mac = rest.partition(":")
    key, why = _key(create=False)
    if key is None:
        return Trust(False, f"its signature cannot be checked: {why}")
    if scheme != _SCHEME or key_id != _key_id(key):
        return Trust(False, "signed with another key (another user's, or another machine's)")
    if not _compare_digest(mac.encode("ascii", "replace"), _mac(key, data).encode()):
        return Trust(False, "its signature does not match its content (changed since written)")
    return Trust(True, "signed with this user's key")
