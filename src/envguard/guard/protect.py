"""`envguard protect`: later pip and uv installs in a venv go through `envguard guard`
without anyone typing it. Two small files do it: a hook that the venv's Python imports at
start (a .pth line), which hands `pip install|uninstall` and `python -m pip ...` to the
guard, and a ``bin/uv`` that does the same for `uv pip install|uninstall|sync` and `uv
add|remove|sync` while the venv is active; the venv's pip.conf pins the GPU stack for any pip
that installs into it. A manifest beside them holds their hashes: an edit by hand is found
and said; `--off` removes every file it lists."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from envguard.errors import UsageError
from envguard.reading import SMALL_CAP, not_json_constant, read_text
from envguard.tools import is_protect_shim, which

if TYPE_CHECKING:
    from envguard.compare.policy import Policy

MANIFEST = "envguard-protect.json"
HOOK = "_envguard_protect.py"
PTH = "_envguard_protect.pth"
UV_SHIM = "bin/uv"
# pip reads the venv's own pip.conf (its "site" configuration) whichever pip runs for the
# venv (`pip --python VENV ...` from another interpreter too): the GPU stack pinned there
# holds where the hook is not imported. uv reads no configuration from a venv.
PIP_CONF = "pip.conf"
CONSTRAINTS = "envguard-constraints.txt"
VERSION = 1
# Every file protect writes, relative to the venv: a manifest that lists another is not
# protect's (--off would remove what it names).
_WRITTEN = re.compile(
    r"bin/uv|pip\.conf|envguard-constraints\.txt"
    r"|lib/python3\.\d+t?/site-packages/_envguard_protect\.(py|pth)"
)

# A shell line that Python reads as a string: the venv's python runs the rest, found
# beside the shim, so no path is written into a #! line (a blank splits it, the kernel cuts
# a long one). The routing is the hook's (guard/hook.py: uv_main), imported from the venv.
_UV_SHIM = """#!/bin/sh
'''exec' "${{0%/*}}/python" -I "$0" "$@"
' '''
# envguard protect: `uv pip install|uninstall|sync`, `uv add|remove|sync` and `uv run` in
# this venv go through `envguard guard`; `uv run --with` and `uv venv` over it are refused
# (written by `envguard protect`; `envguard protect --off` removes it).
import sys

try:
    import _envguard_protect as hook
except ImportError as exc:
    sys.stderr.write("envguard protect: the hook is gone (%s); uv stopped\\n" % exc)
    raise SystemExit(2) from None
hook.uv_main({real!r})
"""


@dataclass(frozen=True)
class Protection:
    """A venv's protection: the files it wrote, those edited by hand or gone since, and
    what it could not cover."""

    venv: Path
    files: tuple[str, ...] = ()
    edited: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())
    # The pins the venv no longer holds: "torch==2.13.0+cpu (installed: 2.14.1)".
    unpinned: tuple[str, ...] = ()
    # Files as an earlier envguard wrote them: `envguard protect` writes this one's.
    outdated: tuple[str, ...] = ()


def site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if len(found) != 1:
        raise UsageError(f"{venv}: no single lib/python3.X/site-packages to put the hook in")
    return found[0]


def _hook_text(venv: Path, envguard: list[str]) -> str:
    source = (Path(__file__).parent / "hook.py").read_text(encoding="utf-8")
    lines = {
        'VENV = ""\n': f"VENV = {str(venv)!r}\n",
        'ENVGUARD = ["python3", "-m", "envguard"]\n': f"ENVGUARD = {envguard!r}\n",
    }
    for old, new in lines.items():
        if source.count(old) != 1:
            raise AssertionError(f"hook.py lost its line {old.strip()!r}")
        source = source.replace(old, new)
    return source


def _real_uv(venv: Path, fallback: str) -> str:
    """uv as PATH finds it outside the venv, never a shim of protect's (the shim must not
    find itself, nor another protected venv's)."""
    bin_dir = str(venv / "bin")
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != bin_dir)
    return which("uv", path=path) or fallback


def constraints_text(pins: dict[str, str]) -> str:
    """The constraints file: each pinned distribution at its installed version, local label
    (+cu128) included; what pip cannot read as a pin is left out."""
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version

    lines = [
        "# envguard protect: the GPU stack as installed; pip in this venv keeps it."
        " `envguard guard --allow NAME -- pip install ...` changes it; `envguard protect"
        " --off` removes this file.",
    ]
    for name, version in sorted(pins.items()):
        try:
            exact = str(Version(version))
        except InvalidVersion:
            continue
        lines.append(f"{canonicalize_name(name)}=={exact}")
    return "\n".join(lines) + "\n"


def gpu_pins(installed: Iterable[tuple[str, str]], *, rules: Policy) -> dict[str, str]:
    """The GPU stack (the policy's critical packages) among ``installed`` (name, version):
    what pip is held to."""
    return {name: version for name, version in installed if rules.is_critical_package(name)}


def protect_installed(
    venv: Path, installed: Iterable[tuple[str, str]], *, rules: Policy
) -> Protection:
    """protect() with this envguard as the guard, the uv PATH finds, and the GPU stack
    among ``installed`` pinned."""

    from envguard.tools import find_uv

    return protect(
        venv,
        envguard=envguard_command(),
        uv=find_uv(),
        pins=gpu_pins(installed, rules=rules),
    )


def envguard_command() -> list[str]:
    """How the hook and the shim start this envguard: never from the working folder
    (`python -m` puts it first on sys.path; -P keeps it off, Python 3.11+), else by its
    console script beside the interpreter (its own folder first), else isolated (-I)."""
    import sys

    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", "envguard"]
    script = Path(sys.executable).parent / "envguard"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-I", "-m", "envguard"]


def protect(
    venv: Path, *, envguard: list[str], uv: str, pins: dict[str, str] | None = None
) -> Protection:
    """Write the hook, the uv shim and (``pins``: name -> installed version) pip's
    constraints into ``venv`` (again, if they were there) and the manifest of their
    hashes."""
    site = site_packages(venv)
    notes = []
    try:
        before = status(venv)
    except UsageError:  # a damaged manifest: protect's files known by what they hold
        before = _recognised(venv)
        notes.append(f"{venv / MANIFEST} was damaged: written again")
    texts = {
        str(site.relative_to(venv) / HOOK): _hook_text(venv, envguard),
        str(site.relative_to(venv) / PTH): f"import {Path(HOOK).stem}\n",
    }
    if pins is not None:
        conf = venv / PIP_CONF
        if conf.exists() and (before is None or PIP_CONF not in before.files):
            notes.append(
                f"{conf} is the venv's own: left alone, so a pip from another interpreter"
                " (pip --python) is not held to the GPU stack's versions"
            )
        else:
            others, said = _configured_constraints(venv)
            notes += said
            texts[CONSTRAINTS] = constraints_text(pins)
            own = _own_constraints(venv)
            # Protected before: pip's listing holds this pip.conf's own line.
            kept = [f for f in dict.fromkeys(others) if f not in own]
            files = " ".join([own[0], *kept])
            texts[PIP_CONF] = f"[install]\nconstraint = {files}\n"
    shim = venv / UV_SHIM
    if shim.exists() and (before is None or UV_SHIM not in before.files):
        notes.append(
            f"{shim} is the venv's own uv: uv installs are not routed (pip's are);"
            " `envguard guard -- uv pip install ...` still guards them"
        )
    else:
        real = _real_uv(venv, uv)
        texts[UV_SHIM] = _UV_SHIM.format(real=real)
    for rel, text in texts.items():
        _write(venv / rel, text, executable=rel == UV_SHIM)
    _write_manifest(venv, {rel: _sha256(text.encode()) for rel, text in texts.items()})
    notes += _compiled(venv, site / HOOK)
    if before is not None and before.edited:
        notes.append("replaced what was edited by hand: " + ", ".join(before.edited))
    return Protection(venv=venv, files=tuple(sorted(texts)), notes=tuple(notes))


def _compiled(venv: Path, hook: Path) -> list[str]:
    """Byte-compile the hook with the venv's own Python (its magic number): every start
    imports it, and a Python that writes no bytecode (PYTHONDONTWRITEBYTECODE, a read-only
    venv) would compile it again at each one. Notes when it could not."""
    import subprocess

    code = "import py_compile, sys; py_compile.compile(sys.argv[1], doraise=True)"
    python = venv / "bin" / "python"
    try:
        proc = subprocess.run(
            [str(python), "-I", "-S", "-c", code, str(hook)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"the hook was not byte-compiled ({exc}): each start compiles it"]
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["no word"])[-1]
        return [f"the hook was not byte-compiled ({last[:200]}): each start compiles it"]
    return []


def _configured_constraints(venv: Path) -> tuple[list[str], list[str]]:
    """The constraint files pip's own configuration names (/etc/pip.conf, the user's): the
    venv's pip.conf would replace them, so it names them after its own. (the files, notes)"""
    import subprocess
    import sys

    # envguard's own interpreter first: the venv's pip would read the venv's pip.conf too,
    # which is protect's own once it was protected (the system's and the user's changes
    # since would be hidden behind it).
    for python in (Path(sys.executable), venv / "bin" / "python"):
        try:
            proc = subprocess.run(
                [str(python), "-m", "pip", "config", "list"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if proc.returncode == 0:
            return _constraint_files(proc.stdout), []
    return [], [
        "pip's own configuration could not be read (no pip to ask): constraint files it names"
        " elsewhere are not applied in this venv while it is protected"
    ]


def _constraint_files(listing: str) -> list[str]:
    """The constraint files of `pip config list` (install.constraint over global.): it
    writes each value as a Python literal (``%r``); pip splits it at blanks."""
    import ast

    found: dict[str, list[str]] = {}
    for line in listing.splitlines():
        key, eq, value = line.partition("=")
        if eq and key in ("global.constraint", "install.constraint"):
            try:
                text = ast.literal_eval(value)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
            if isinstance(text, str):
                found[key] = text.split()
    return found.get("install.constraint", found.get("global.constraint", []))


def _own_constraints(venv: Path) -> tuple[str, ...]:
    """How pip.conf names the constraints file: its path, or (a path pip would split at
    its blanks) its file: URL, which pip reads as the file; then every other spelling."""
    path = venv / CONSTRAINTS
    url = path.as_uri()
    if any(ch.isspace() for ch in str(path)):
        return (url, str(path))
    return (str(path), url)


def guard_constraints(venv: Path) -> str | None:
    """What PIP_CONSTRAINT holds for the guard's own pip runs in a venv whose pip.conf is
    protect's: the constraint files pip's configuration names elsewhere, without protect's
    pins (the guard decides what changes); None when the venv's pip.conf is not protect's."""
    try:
        if PIP_CONF not in _manifest_files(venv):
            return None
        text = read_text(str(venv / PIP_CONF), SMALL_CAP) or ""
    except (UsageError, OSError):
        return None
    for line in text.splitlines():
        key, eq, value = line.partition("=")
        if eq and key.strip() == "constraint":
            own = _own_constraints(venv)
            others = [f for f in value.split() if f not in own]
            return " ".join(others) or os.devnull
    return os.devnull


def refresh(venv: Path, pins: dict[str, str]) -> bool:
    """Pin the GPU stack again after a guarded change; False when the venv's constraints
    are not protect's as written (absent, or edited by hand: left alone)."""
    found = status(venv)
    if found is None or CONSTRAINTS not in found.files or CONSTRAINTS in found.edited:
        return False
    files = _manifest_files(venv)
    text = constraints_text(pins)
    _write(venv / CONSTRAINTS, text, executable=False)
    files[CONSTRAINTS] = _sha256(text.encode())
    _write_manifest(venv, files)
    return True


def _write_manifest(venv: Path, files: dict[str, str]) -> None:
    manifest = {"schema_version": VERSION, "venv": str(venv), "files": files}
    _write(venv / MANIFEST, json.dumps(manifest, indent=2) + "\n", executable=False)


def _write(path: Path, text: str, *, executable: bool) -> None:
    tmp = path.with_name(f".{path.name}.envguard-tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(0o755 if executable else 0o644)
    os.replace(tmp, path)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def status(venv: Path) -> Protection | None:
    """The venv's protection as its manifest says, each file checked; None when it has
    none. UsageError for a damaged manifest."""
    if not (venv / MANIFEST).exists():
        return None
    files = _manifest_files(venv)
    edited, missing = [], []
    for rel, digest in sorted(files.items()):
        data = _read(venv / rel)
        if data is None:
            missing.append(rel)
        elif _sha256(data) != digest:
            edited.append(rel)
    unpinned = () if CONSTRAINTS in missing or CONSTRAINTS not in files else not_held(venv)
    as_written = [rel for rel in files if rel not in edited and rel not in missing]
    return Protection(
        venv=venv,
        files=tuple(sorted(files)),
        edited=tuple(edited),
        missing=tuple(missing),
        unpinned=unpinned,
        outdated=tuple(sorted(rel for rel in as_written if _earlier(venv, rel))),
    )


def _earlier(venv: Path, rel: str) -> bool:
    """``rel`` (the hook or the shim, as written) is an earlier envguard's: this one would
    write another text with the same filled-in values (the hooks before the guard's token
    let a marker exported by hand through)."""
    import ast

    if not rel.endswith((HOOK, UV_SHIM)):
        return False
    text = (_read(venv / rel) or b"").decode("utf-8", "replace")
    lead = "ENVGUARD = " if rel.endswith(HOOK) else "hook.uv_main("
    line = next((ln for ln in text.splitlines() if ln.startswith(lead)), None)
    try:
        value = ast.literal_eval(line[len(lead) :].rstrip(")")) if line else None
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        value = None
    if rel.endswith(HOOK):
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return not ok or text != _hook_text(venv, value)  # type: ignore[arg-type]
    return not isinstance(value, str) or text != _UV_SHIM.format(real=value)


def not_held(venv: Path) -> tuple[str, ...]:
    """The pins of the venv's constraints file that what is installed no longer matches
    (installed by hand past the hook: `pip --python`, `python -S`, another uv)."""
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version

    installed: dict[str, str] = {}
    with contextlib.suppress(OSError, UsageError):
        for entry in sorted(os.listdir(site_packages(venv)))[:100_000]:
            if entry.endswith(".dist-info"):
                name, _, version = entry[: -len(".dist-info")].rpartition("-")
                installed[canonicalize_name(name)] = version
    text = (_read(venv / CONSTRAINTS) or b"").decode("utf-8", "replace")
    out = []
    for line in text.splitlines()[:10_000]:
        name, eq, pinned = line.partition("==")
        if not eq or line.startswith("#"):
            continue
        have = installed.get(canonicalize_name(name.strip()))
        try:
            held = have is not None and Version(have) == Version(pinned.strip())
        except InvalidVersion:
            held = False
        if not held:
            out.append(f"{line.strip()} (installed: {have or 'none'})")
    return tuple(out)


def _manifest_files(venv: Path) -> dict[str, str]:
    """The manifest's files (relative path -> sha256); {} when there is none, UsageError
    when it is damaged."""
    path = venv / MANIFEST
    if not path.exists():
        return {}
    text = read_text(str(path), SMALL_CAP)
    try:
        raw = json.loads(text or "", parse_constant=not_json_constant)
        files = raw["files"]
        if raw.get("schema_version") != VERSION or not isinstance(files, dict):
            raise ValueError("not a manifest this envguard reads")
        for rel, digest in files.items():
            if not isinstance(digest, str) or not _WRITTEN.fullmatch(rel):
                raise ValueError(f"a file protect does not write: {rel[:200]!r}")
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise UsageError(
            f"{path}: a damaged protection manifest ({exc})",
            hint="envguard protect writes it again; --off then removes what it lists",
        ) from None
    return dict(files)


def _read(path: Path) -> bytes | None:
    from envguard.reading import read_bytes

    if path.is_symlink():
        return b""  # a link put in its place: never followed, never equal
    try:
        return read_bytes(str(path), SMALL_CAP)
    except OSError:
        return None


def unprotect(venv: Path) -> Protection | None:
    """Remove every file the protection wrote, and its manifest; what was removed (None:
    the venv was not protected). A pip.conf edited by hand keeps the edits (protect's line
    goes); a bin/uv that is no longer the shim (uv's own, installed over it) stays."""
    from dataclasses import replace

    found = status(venv)
    if found is None:
        return None
    notes = []
    removed = []
    for rel in found.files:
        path = venv / rel
        if rel in found.edited and rel == UV_SHIM and not _is_shim(path):
            notes.append(f"{path} is no longer protect's uv shim: left as it is")
            continue
        if rel in found.edited and rel == PIP_CONF:
            rest = _without_protect_line(venv, _read(path) or b"")
            if rest.strip():
                _write(path, rest, executable=False)
                notes.append(f"{path} was edited by hand: protect's constraint line removed")
                continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        removed.append(rel)
    # What Python compiled of the hook when it imported it.
    for cached in site_packages(venv).glob(f"__pycache__/{Path(HOOK).stem}.*.pyc"):
        cached.unlink()
    (venv / MANIFEST).unlink()
    return replace(found, files=tuple(removed), notes=found.notes + tuple(notes))


def _recognised(venv: Path) -> Protection:
    """The files of a protection whose manifest is lost: a bin/uv that is the shim, a
    pip.conf holding protect's constraint line."""
    files = []
    if _is_shim(venv / UV_SHIM):
        files.append(UV_SHIM)
    conf = _read(venv / PIP_CONF)
    if conf and _without_protect_line(venv, conf) != conf.decode("utf-8", "replace"):
        files.append(PIP_CONF)
    return Protection(venv=venv, files=tuple(files))


def _is_shim(path: Path) -> bool:
    """``path`` is still protect's uv shim (edited, maybe): its opening says so."""
    return not path.is_symlink() and is_protect_shim(str(path))


def _without_protect_line(venv: Path, data: bytes) -> str:
    """pip.conf's text without the constraint line protect wrote (it names protect's
    constraints file first), nor a section left empty by that."""
    own = _own_constraints(venv)
    lines = []
    for line in data.decode("utf-8", "replace").splitlines():
        key, eq, value = line.partition("=")
        if eq and key.strip() == "constraint" and value.split()[:1] and value.split()[0] in own:
            continue
        lines.append(line)
    kept: list[str] = []
    for n, line in enumerate(lines):  # a section header with nothing under it goes
        header = line.strip().startswith("[")
        following = next((x for x in lines[n + 1 :] if x.strip()), "")
        if header and (not following or following.strip().startswith("[")):
            continue
        kept.append(line)
    return "\n".join(kept).strip("\n") + "\n" if any(x.strip() for x in kept) else ""
