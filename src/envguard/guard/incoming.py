"""What an install would bring, file by file: the wheel each planned package would be
installed from (its URL and sha256, from pip's report or a resolution uv writes as
pylock.toml with the command's own index options), unpacked into a scratch prefix before
anything touches the venv, and the pinned requirements that make the install itself take
exactly those files (``--require-hashes``).

The scratch prefix is what the would-be venv is measured from (api.capture.fit, overlay):
each package's files (a rebuilt wheel of the same version is a change), torch's build from
its own version.py, and the fit of every extension against what the venv would hold."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envguard.errors import UsageError
from envguard.guard.command import SOURCE_OPTIONS
from envguard.guard.resolve import read_output, sha256_of, start_reading, wheel_url

if TYPE_CHECKING:
    from envguard.guard.command import InstallCommand
    from envguard.guard.resolve import Planned

# Packages whose files are fetched and read before an install; past it, guard refuses.
MAX_PACKAGES = 1000

# The options of an install command that say where packages come from and how they are
# installed: passed on to the resolution that names the files, the unpack, and the pinned
# install (so all three see what the command would see). Values follow those in _VALUED.
_VALUED = SOURCE_OPTIONS
_FLAGS = frozenset(
    {
        "--no-index",
        "--offline",
        "--no-config",
        "--pre",
        "--refresh",
        "--native-tls",
        "--no-sources",
        "--prefer-binary",
        "--isolated",
    }
)
# Options that shape the install itself, not the choice of files: the pinned install keeps.
_INSTALL_VALUED = frozenset({"--link-mode", "-C", "--config-setting", "--config-settings"})
_INSTALL_FLAGS = frozenset({"--compile-bytecode", "--compile", "--no-compile", "-q", "--quiet"})


@dataclass(frozen=True)
class Wheel:
    """The file one package would be installed from."""

    name: str
    version: str
    url: str
    sha256: str

    @property
    def filename(self) -> str:
        return self.url.split("#", 1)[0].split("?", 1)[0].rsplit("/", 1)[-1]


def source_options(command: InstallCommand, *, install: bool = False) -> list[str]:
    """The command's words that say where packages come from (``install``: and how they
    are installed), as given."""
    valued, flags = _VALUED, _FLAGS
    if install:
        valued, flags = valued | _INSTALL_VALUED, flags | _INSTALL_FLAGS
    out: list[str] = []
    args = command.args
    i = 0
    while i < len(args):
        word = args[i]
        # --find-links=DIR, -fDIR: the option's own part.
        option = word.partition("=")[0] if word.startswith("--") else word[:2]
        if option in valued:
            if "=" in word or (not word.startswith("--") and len(word) > 2):
                out.append(word)
            elif i + 1 < len(args):
                out += [word, args[i + 1]]
                i += 1
        elif word in flags:
            out.append(word)
        i += 1
    return out


def locate_uv(
    planned: Iterable[Planned],
    command: InstallCommand,
    *,
    venv: Path,
    uv: str,
    env: Mapping[str, str],
    timeout: float,
) -> dict[str, Wheel]:
    """The wheel uv would install for each of ``planned`` (name -> Wheel; a package that
    would not come from a wheel is left out): `uv pip compile --format pylock.toml` of the
    planned versions, exactly pinned, with the command's index options."""
    wanted = {p.name: p.version for p in planned}
    if not wanted:
        return {}
    argv = [
        uv,
        "pip",
        "compile",
        "-",
        "--format",
        "pylock.toml",
        "--no-deps",
        "--no-header",
        "--quiet",
        "--python",
        str(venv / "bin" / "python"),
        *source_options(command),
    ]
    pins = "".join(f"{name}=={version}\n" for name, version in sorted(wanted.items()))
    out = _run(argv, env, stdin=pins, timeout=timeout, noun="resolution of the files")
    try:
        return _from_pylock(out.decode("utf-8"), wanted)
    except (ValueError, TypeError, UnicodeDecodeError) as exc:
        raise UsageError(
            f"uv's resolution of the files said something envguard does not read ({exc})"
        ) from None


def _from_pylock(text: str, wanted: Mapping[str, str]) -> dict[str, Wheel]:
    import sys

    from packaging.utils import canonicalize_name

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    data = tomllib.loads(text)
    packages = data.get("packages")
    if not isinstance(packages, list):
        raise ValueError("no packages")
    found: dict[str, Wheel] = {}
    for entry in packages:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ValueError("a package without a name")
        name = canonicalize_name(entry["name"])
        if name not in wanted or str(entry.get("version")) != wanted[name]:
            continue
        wheels = entry.get("wheels")
        if not isinstance(wheels, list) or len(wheels) != 1 or not isinstance(wheels[0], dict):
            continue  # an sdist, a folder, a VCS checkout: no file to read before the build
        url = wheel_url(wheels[0].get("url"))
        hashes = wheels[0].get("hashes")
        digest = sha256_of(hashes.get("sha256")) if isinstance(hashes, dict) else None
        if url is not None and digest is not None:
            found[name] = Wheel(name=name, version=wanted[name], url=url, sha256=digest)
    return found


def pinned_requirements(wheels: Iterable[Wheel]) -> str:
    """The requirements file that installs exactly ``wheels`` (``--require-hashes``)."""
    return "".join(f"{w.name}=={w.version} --hash=sha256:{w.sha256}\n" for w in wheels)


def unpack(
    wheels: Iterable[Wheel],
    command: InstallCommand,
    *,
    venv: Path,
    uv: str,
    env: Mapping[str, str],
    scratch: Path,
    timeout: float,
) -> Path:
    """``wheels`` installed into the prefix ``scratch`` (never the venv), each checked
    against its sha256: the site-packages folder that holds them. uv's cache serves what
    it holds (the install that follows takes the same files from it)."""
    listed = list(wheels)
    if len(listed) > MAX_PACKAGES:
        raise UsageError(
            f"this install would bring {len(listed)} packages; envguard reads at most"
            f" {MAX_PACKAGES} before an install"
        )
    requirements = scratch / "previewed.txt"
    # A file URL or an index's: named as the command would find it, by version and hash.
    if command.tool == "uv":
        requirements.write_text(pinned_requirements(listed))
        sources = source_options(command)
    else:  # pip's report names each file's URL: taken as named
        requirements.write_text(
            "".join(f"{w.name} @ {w.url} --hash=sha256:{w.sha256}\n" for w in listed)
        )
        sources = []
    prefix = scratch / "prefix"
    argv = [
        uv,
        "pip",
        "install",
        "--prefix",
        str(prefix),
        "--python",
        str(venv / "bin" / "python"),
        "--no-deps",
        "--require-hashes",
        # Linked from uv's cache where it can (only read, then removed), never symlinked:
        # a link out of the scratch prefix is not read as its file.
        "--link-mode",
        "hardlink",
        "--quiet",
        "-r",
        str(requirements),
        *sources,
    ]
    _run(argv, env, stdin=None, timeout=timeout, noun="unpack of the incoming wheels")
    found = sorted(prefix.glob("lib/python*/site-packages"))
    if len(found) != 1:
        raise UsageError("the incoming wheels were unpacked, but not into one site-packages")
    return found[0]


def pinned_install(
    command: InstallCommand, wheels: Iterable[Wheel], *, venv: Path, replaced: Iterable[str]
) -> tuple[list[str], str]:
    """(the argv that installs exactly ``wheels`` into ``venv``, minus its requirements
    file's path, which follows it; that file's text): each by version and hash, with the
    command's index and install options, ``replaced`` packages reinstalled."""
    listed = list(wheels)
    options = source_options(command, install=True)
    if command.tool == "uv":
        again = [w for name in sorted(set(replaced)) for w in ("--reinstall-package", name)]
        argv = [
            command.argv[0],
            "pip",
            "install",
            "--python",
            str(venv / "bin" / "python"),
            "--no-deps",
            "--require-hashes",
            *again,
            *options,
            "-r",
        ]
    else:
        argv = [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--require-hashes",
            "--force-reinstall",
            "--disable-pip-version-check",
            *options,
            "-r",
        ]
    return argv, pinned_requirements(listed)


def _run(
    argv: list[str], env: Mapping[str, str], *, stdin: str | None, timeout: float, noun: str
) -> bytes:
    """``argv``'s output once it ended by ``timeout`` (UsageError, the child stopped, when
    it did not or failed); ``stdin``: what it reads."""
    import subprocess
    import tempfile

    deadline = time.monotonic() + timeout
    if stdin is None:
        proc = start_reading(argv, env)
        return read_output(proc, deadline, timeout=timeout, label="uv", noun=noun)
    with tempfile.TemporaryFile() as held:
        held.write(stdin.encode())
        held.seek(0)
        from envguard.lifecycle import start_child

        proc = start_child(
            argv,
            stdin=held,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env),
            cwd=os.getcwd(),
        )
        return read_output(proc, deadline, timeout=timeout, label="uv", noun=noun)
