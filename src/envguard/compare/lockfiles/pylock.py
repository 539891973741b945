"""PEP 751 pylock.toml: [[packages]] whose marker holds for the interpreter."""

from __future__ import annotations

from pathlib import Path

from packaging.utils import canonicalize_name

from envguard.compare.lockfiles.common import LockfileError, Pin, applies, read_toml


def read_pylock(path: Path, env: dict[str, str]) -> dict[str, Pin]:
    """PEP 751 pylock.toml: [[packages]] whose marker holds for this interpreter."""
    data = read_toml(path)
    if "lock-version" not in data or not isinstance(data.get("packages"), list):
        raise LockfileError(f"{path}: not a PEP 751 lock (needs lock-version and [[packages]])")
    pins: dict[str, Pin] = {}
    for pkg in data["packages"]:
        if not isinstance(pkg, dict) or not isinstance(pkg.get("name"), str):
            raise LockfileError(f"{path}: a [[packages]] entry has no name")
        if not applies(pkg.get("marker"), env, where=str(path)):
            continue
        name = canonicalize_name(pkg["name"])
        directory = pkg.get("directory")
        if isinstance(directory, dict) and directory.get("editable"):
            pins[name] = Pin(name=name, editable=str((path.parent / directory["path"]).resolve()))
        elif isinstance(pkg.get("vcs"), dict):
            vcs = pkg["vcs"]
            pins[name] = Pin(
                name=name,
                version=pkg.get("version"),
                url=f"{vcs.get('type', 'git')}+{vcs.get('url')}",
            )
        else:
            pins[name] = Pin(name=name, version=pkg.get("version"))
    return pins
