"""Snapshots written here are trusted by a key, not by fields a forger copies: a snapshot
`envguard snapshot` wrote is signed with this user's key (made on first use in the config
folder, 0600), and restore sets its code-loading variables as written; a forged file that
copies host and user, one signed with another key, one changed since it was signed, or one
with no signature keeps the review rule (held, with the reason)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from envguard.snapshots import signing, store
from factories import make_git_repo
from hostile.helpers import envguard

CACHE = "/srv/team/inductor-cache"  # the user's own compile cache, as the job had it
SHOW = f"{sys.executable} -c 'import json, os; print(json.dumps(dict(os.environ)))'"


def _take(work: Path, **env: str) -> dict[str, object]:
    """`envguard snapshot --name good` of this interpreter in ``work``, with ``env`` set."""
    work.mkdir(exist_ok=True)
    done = envguard(
        "snapshot", "--python", sys.executable, "--name", "good", cwd=work,
        TORCHINDUCTOR_CACHE_DIR=CACHE, **env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    data: dict[str, object] = json.loads((work / "snapshots" / "good.json").read_text())
    return data


def _restore(work: Path) -> tuple[list[str], dict[str, str]]:
    """restore --execute of ``good`` (nothing to rebuild): the env file's lines, and the
    environment --then got. The restoring shell has no cache variable of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHINDUCTOR")}
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "envguard", "restore", "good", "--venv", sys.prefix,
         "--execute", "--then", SHOW],
        cwd=work, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    given = json.loads(out.stdout.rstrip("\n").rsplit("\n", 1)[-1])
    return (work / "good.env.sh").read_text().splitlines(), given


def test_a_snapshot_taken_here_restores_its_cache_variable_as_written(tmp_path: Path) -> None:
    data = _take(tmp_path / "p")
    assert data["env"]["TORCHINDUCTOR_CACHE_DIR"] == CACHE  # type: ignore[index]
    assert str(data["signature"]).startswith("hmac-sha256:")
    lines, given = _restore(tmp_path / "p")
    assert f"export TORCHINDUCTOR_CACHE_DIR={CACHE}" in lines
    assert "# signed with this user's key: every variable is set as it was recorded" in lines
    assert given["TORCHINDUCTOR_CACHE_DIR"] == CACHE
    # The key: in the config folder, this user's only, never in the snapshot.
    key = Path(os.environ["XDG_CONFIG_HOME"]) / "envguard" / signing.KEY_NAME
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    assert key.read_text().strip() not in (tmp_path / "p" / "snapshots" / "good.json").read_text()


def _held(lines: list[str], given: dict[str, str], why: str) -> None:
    assert f"# {why}: variables that load code are held for review" in lines, lines
    assert f"# review, then uncomment: export TORCHINDUCTOR_CACHE_DIR={CACHE}" in lines
    assert f"export TORCHINDUCTOR_CACHE_DIR={CACHE}" not in lines
    assert "TORCHINDUCTOR_CACHE_DIR" not in given


def test_a_forged_file_copying_host_and_user_is_held(tmp_path: Path) -> None:
    """Written by hand (or by a pull request) from a real one's host and user, as a forger
    would from a log: no signature, or the real one's signature pasted on."""
    real = _take(tmp_path / "real")
    forged = tmp_path / "forged"
    _take(forged)
    data = json.loads((forged / "snapshots" / "good.json").read_text())
    data.update(host=real["host"], user=real["user"], env={"TORCHINDUCTOR_CACHE_DIR": CACHE})
    data["note"] = "forged"
    for signature, why in (
        (None, "not signed by this user's envguard (no signature)"),
        (real["signature"], "its signature does not match its content (changed since written)"),
    ):
        data["signature"] = signature
        (forged / "snapshots" / "good.json").write_text(json.dumps(data))
        _held(*_restore(forged), why=why)


def test_a_signature_of_any_text_is_held_not_a_traceback(tmp_path: Path) -> None:
    """The signature is the file's own text: one with a character outside ASCII (which
    hmac.compare_digest refuses with a TypeError) is a signature that does not match."""
    data = _take(tmp_path / "p")
    scheme, key_id, mac = str(data["signature"]).split(":")
    path = tmp_path / "p" / "snapshots" / "good.json"
    for forged in ("\u00e9" + mac[1:], mac[:-1] + "\u202e", "\ud800", "\x00"):
        data["signature"] = f"{scheme}:{key_id}:{forged}"
        assert not signing.trust(json.dumps(data)).signed
    data["signature"] = f"{scheme}:{key_id}:\u00e9{mac[1:]}"
    path.write_text(json.dumps(data))
    _held(
        *_restore(tmp_path / "p"),
        why="its signature does not match its content (changed since written)",
    )


@pytest.mark.parametrize("size", [0, 1, 32, 64, 65, 300])
def test_the_signature_is_hmac_sha256_as_the_standard_library_makes_it(size: int) -> None:
    """signing computes HMAC-SHA256 with CPython's built-in SHA-256 (hashlib would load
    OpenSSL first): the same value hmac.new gives, keys longer than a block included."""
    import hashlib
    import hmac

    key = bytes(range(256))[:size] * 1
    data = {"name": "good", "signature": None, "note": "caf\u00e9 " * size}
    want = hmac.new(key, signing.canonical(data), hashlib.sha256).hexdigest()
    assert signing._mac(key, data) == want


def test_signing_and_checking_load_no_openssl(tmp_path: Path) -> None:
    """hashlib and hmac load OpenSSL first (3 ms of a snapshot's CPU): signing a document
    and checking it use CPython's own SHA-256."""
    import subprocess

    code = (
        "import sys\n"
        "from envguard.snapshots import signing\n"
        "doc = signing.signed({'name': 'good', 'note': None})\n"
        "assert doc['signature'].startswith('hmac-sha256:'), doc\n"
        "import json\n"
        "assert signing.trust(json.dumps(doc)).signed\n"
        "print(sorted({'hashlib', 'hmac', '_hashlib'} & set(sys.modules)))\n"
    )
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_snapshot_signed_with_another_key_is_held(tmp_path: Path) -> None:
    other = tmp_path / "other-user-config"
    _take(tmp_path / "p", XDG_CONFIG_HOME=str(other))
    assert (other / "envguard" / signing.KEY_NAME).is_file()
    _held(
        *_restore(tmp_path / "p"),
        why="signed with another key (another user's, or another machine's)",
    )


def test_a_key_given_twice_is_no_signature(tmp_path: Path) -> None:
    """Two parsers may pick different copies of a repeated key: a signed file with a second
    "env" spliced in is not trusted, whichever copy the signature covers."""
    data = _take(tmp_path / "p")
    path = tmp_path / "p" / "snapshots" / "good.json"
    text = path.read_text()
    spliced = text.replace('"env": {', '"env": {"TORCHINDUCTOR_CACHE_DIR": "/evil"}, "env": {', 1)
    assert spliced != text and json.loads(spliced)["signature"] == data["signature"]
    assert signing.trust(text).signed
    assert not signing.trust(spliced).signed


def test_a_key_in_the_working_tree_or_readable_by_others_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from factories import snapshot

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    text = store.dumps(signing.signed(snapshot(name="x")))
    assert signing.trust(text).signed
    key = tmp_path / "config" / "envguard" / signing.KEY_NAME
    # A checkout that carries a key, with XDG_CONFIG_HOME pointed at it (a CI step may set
    # it to the workspace): the key signs nothing and checks nothing.
    repo = make_git_repo(tmp_path / "repo")
    planted = repo / "sub" / ".config" / "envguard" / signing.KEY_NAME
    planted.parent.mkdir(parents=True)
    planted.write_bytes(key.read_bytes())
    planted.chmod(0o600)
    monkeypatch.chdir(repo / "sub")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(repo / "sub" / ".config"))
    assert signing.signed(snapshot(name="x"))["signature"] is None
    assert "lies in the git work tree; not used" in signing.trust(text).why
    assert not signing.trust(text).signed
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    key.chmod(0o644)
    assert "others can read it" in signing.trust(text).why and not signing.trust(text).signed


def test_old_unsigned_snapshots_still_load_and_are_held() -> None:
    from factories import snapshot

    data = json.loads(store.dumps(snapshot(name="old")))
    del data["signature"]
    data["schema_minor"] = 5
    text = json.dumps(data)
    assert store.loads(text, source="old").signature is None
    assert signing.trust(text).why == "not signed by this user's envguard (no signature)"
