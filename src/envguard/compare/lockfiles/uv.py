"""uv.lock: the packages `uv sync` would install, as uv itself says (`uv export --frozen
--format pylock.toml` with the user's extras and groups), read as PEP 751. A walk of the
lock by hand is the fallback when uv cannot run here (not found, too old, no project beside
the lock or in the working directory, no private folder for uv's copy of the project); the
output says when it was used."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from envguard.compare.lockfiles.common import (
    LockfileError,
    LockRead,
    Pin,
    applies,
    marker_text,
    merged,
    package_lines,
    parse_toml,
    reason,
)
from envguard.compare.lockfiles.pylock import read_pylock_text
from envguard.compare.lockfiles.uvsettings import resolver_settings
from envguard.compare.selection import Selection
from envguard.errors import UsageError
from envguard.reading import envguard_cache
from envguard.tools import user_environ

# uv's answer is a lock of at most a few thousand packages; past this it is not one.
_EXPORT_CAP = 64 << 20
_EXPORT_SECONDS = 120


def read_uv_lock(
    text: str,
    *,
    where: str,
    path: Path | None,
    env: dict[str, str] | None,
    selection: Selection,
    freshness: bool = False,
) -> LockRead:
    """Pins from a uv.lock's ``text`` (at ``path``, None when it came from stdin); ``env``
    None: for every environment the lock covers (a lock change), markers kept as scopes.

    uv exports the project's own ``uv.lock``, whatever file was named: a lock under another
    name (``old.lock``) or from stdin (``git show HEAD~1:uv.lock``) is exported from a
    scratch copy of its project (the pyproject.toml files, this text as uv.lock), so both
    sides of ``diff --lock OLD --lock NEW`` are read the same way, by uv. ``freshness``:
    for the project's own uv.lock, also ask `uv lock --check` whether it is stale."""
    lines = package_lines(text, "[[package]]")
    project = _project_of(path)
    why_not = _why_no_uv(project, stdin=path is None)
    own = path is not None and path.name == "uv.lock" and path.parent.absolute() == project
    scratch = None if why_not is not None or own else _private_folder()
    if why_not is None and not own and scratch is None:
        why_not = "no private folder of yours for uv's copy of the project (HOME unset?)"
    data = parse_toml(text, where=where)
    if why_not is None:
        assert project is not None
        settings = resolver_settings(project, user_environ())
        if scratch is None:
            exported = _export(project, selection, where=where, settings=settings)
        else:
            exported = _export_copy(
                project, text, selection, where=where, parent=scratch, settings=settings
            )
        pins = read_pylock_text(
            exported,
            where=f"{where} (as uv exports it)",
            base=project,
            env=env,
            selection=Selection(),
        )
        stale, note = (
            _freshness(project, where=where, settings=settings)
            if freshness and own
            else (None, None)
        )
        notes: tuple[str, ...] = () if note is None else (note,)
    else:
        try:
            pins = walk(data, where=where, base=_base(path, project), env=env, selection=selection)
        except (TypeError, AttributeError, KeyError) as exc:  # a value of the wrong type
            raise LockfileError(
                f"{where}: not a uv.lock envguard can read (a {type(exc).__name__} in its values)"
            ) from None
        note = f"{where} was read by envguard's own walk, not by uv ({why_not})"
        if freshness:
            note += "; whether it is out of date with pyproject.toml was not checked"
        stale, notes = None, (note,)
    survey = _survey(data)
    elsewhere = _elsewhere(survey, pins, env, where=where)
    return LockRead(
        pins={
            n: _at(_scoped(p, survey, everywhere=env is None), lines.get(n))
            for n, p in pins.items()
        },
        notes=notes,
        exact=True,
        stale=stale,
        elsewhere=elsewhere,
        aside=_aside(survey, elsewhere, base=_base(path, project), lines=lines),
        requires=survey.requires,
    )


@dataclass(frozen=True)
class _Survey:
    """A uv.lock read as a graph, nothing evaluated: what each package requires, what the
    workspace's own dependencies reach, and which extras and groups reach the rest."""

    packages: list[dict[str, Any]]
    requires: dict[str, frozenset[str]]
    default: frozenset[str]
    # name -> [("extra `cpu`", "--extra cpu"), ...]: the options that install it
    options: dict[str, list[tuple[str, str]]]
    # name -> the marker of every edge into it (None: an edge without one)
    markers: dict[str, set[str | None]]


def _survey(data: dict[str, Any]) -> _Survey:
    """Best effort: a lock of unexpected shape gives an empty survey (no scopes, no hints)."""
    try:
        return _survey_of(data)
    except (TypeError, AttributeError, KeyError, ValueError):
        return _Survey(packages=[], requires={}, default=frozenset(), options={}, markers={})


def _survey_of(data: dict[str, Any]) -> _Survey:
    packages = [p for p in data.get("package", []) if isinstance(p, dict)]
    deps: dict[str, set[str]] = {}
    markers: dict[str, set[str | None]] = {}
    for pkg in packages:
        name = canonicalize_name(pkg["name"])
        edges = list(pkg.get("dependencies", []))
        for table in ("optional-dependencies", "dev-dependencies"):
            for listed in (pkg.get(table) or {}).values():
                edges += listed
        for dep in edges:
            target = canonicalize_name(dep["name"])
            deps.setdefault(name, set()).add(target)
            markers.setdefault(target, set()).add(dep.get("marker"))

    def reach(start: list[dict[str, Any]]) -> set[str]:
        seen: set[str] = set()
        todo: list[str] = [canonicalize_name(d["name"]) for d in start]
        while todo:
            here = todo.pop()
            if here not in seen:
                seen.add(here)
                if here in members:  # a member as a dependency: not its extras or groups
                    todo += [
                        canonicalize_name(d["name"]) for d in by_name[here].get("dependencies", [])
                    ]
                else:
                    todo += deps.get(here, ())
        return seen

    by_name: dict[str, dict[str, Any]] = {canonicalize_name(p["name"]): p for p in packages}
    members = {
        canonicalize_name(p["name"])
        for p in packages
        if any(k in (p.get("source") or {}) for k in ("virtual", "editable", "directory"))
    }
    default: set[str] = set()
    options: dict[str, list[tuple[str, str]]] = {}
    for name in sorted(members):
        pkg = by_name[name]
        default |= reach(list(pkg.get("dependencies", [])))
        for table, kind in (("optional-dependencies", "extra"), ("dev-dependencies", "group")):
            for label, listed in sorted((pkg.get(table) or {}).items()):
                option = (f"{kind} `{label}`", f"--{kind} {label}")
                for reached in reach(listed):
                    options.setdefault(reached, []).append(option)
    return _Survey(
        packages=packages,
        requires={n: frozenset(t) for n, t in deps.items()},
        default=frozenset(default),
        options={n: list(dict.fromkeys(o)) for n, o in options.items()},
        markers=markers,
    )


def _scoped(pin: Pin, survey: _Survey, *, everywhere: bool) -> Pin:
    """``pin`` with the extras and groups that install it, when the project's own
    dependencies do not; ``everywhere``, with the markers of the edges into it when the
    reader kept none (envguard's walk: uv's export keeps its own)."""
    from dataclasses import replace

    found: tuple[str, ...] = ()
    if pin.name not in survey.default and pin.name in survey.options:
        found = tuple(label.replace("`", "") for label, _ in survey.options[pin.name])
    said = survey.markers.get(pin.name, set())
    if everywhere and not pin.scope and said and None not in said:
        found += (" or ".join(sorted(marker_text(m) for m in said if m)),)
    return replace(pin, scope=tuple(dict.fromkeys(found + pin.scope))) if found else pin


def _elsewhere(
    survey: _Survey, pins: dict[str, Pin], env: dict[str, str] | None, *, where: str
) -> dict[str, tuple[str, str]]:
    """Why each package the lock holds is not installed: only in an extra or group of a
    project of the workspace that is not selected, or only behind markers (a platform) that
    are false here (never said without an interpreter: the lock is read for all of them)."""
    out: dict[str, tuple[str, str]] = {}
    for pkg in survey.packages:
        name = canonicalize_name(str(pkg.get("name")))
        if name in pins or name in out:
            continue
        if name in survey.options:
            found = survey.options[name]
            labels = " or ".join(label for label, _ in found)
            flags = " or ".join(flag for _, flag in found)
            out[name] = ("selection", f"only in {labels}, not selected: add {flags}")
            continue
        said = survey.markers.get(name, set())
        try:
            outside = (
                env is not None
                and bool(said)
                and None not in said
                and not any(applies(m, env, where=where) for m in said)
            )
        except LockfileError:
            outside = False
        if outside:
            out[name] = ("platform", " or ".join(sorted(m for m in said if m)))
    return out


def _aside(
    survey: _Survey, elsewhere: dict[str, tuple[str, str]], *, base: Path, lines: dict[str, int]
) -> dict[str, Pin]:
    """The lock's pins of the packages it holds but does not install here."""
    aside: dict[str, Pin] = {}
    for pkg in survey.packages:
        name = canonicalize_name(str(pkg.get("name")))
        if name not in elsewhere:
            continue
        source = pkg.get("source") if isinstance(pkg.get("source"), dict) else {}
        kind, text = elsewhere[name]
        scope = (
            (marker_text(text),)
            if kind == "platform"
            else tuple(label.replace("`", "") for label, _ in survey.options.get(name, ()))
        )
        pin = replace(_uv_pin(name, pkg, source or {}, base), line=lines.get(name), scope=scope)
        aside[name] = merged(aside.get(name), pin)
    return aside


def _project_of(path: Path | None) -> Path | None:
    """The project a lock belongs to: the folder holding it when it has a pyproject.toml,
    else (stdin, or a lock copied elsewhere) the working directory's project."""
    if path is not None and (path.parent / "pyproject.toml").is_file():
        return path.parent.absolute()
    here = Path.cwd()
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file():
            return folder
        if (folder / ".git").exists():
            break
    return None


def _base(path: Path | None, project: Path | None) -> Path:
    """What the lock's relative paths are relative to: its own folder (uv writes them so),
    else (stdin) the project found from the working directory, else that directory."""
    if path is not None:
        return path.parent.absolute()
    return project or Path.cwd()


def _at(pin: Pin, line: int | None) -> Pin:
    from dataclasses import replace

    return replace(pin, line=line)


def _why_no_uv(project: Path | None, *, stdin: bool) -> str | None:
    if project is None:
        return "no pyproject.toml beside it" + (" or in the working directory" if stdin else "")
    from envguard.compare.lockfiles.common import confined

    confined(project / "pyproject.toml", what="pyproject.toml beside the lock")
    from envguard.tools import find_modern_uv

    try:
        find_modern_uv()
    except UsageError as exc:
        return exc.message
    return None


def _private_folder() -> Path | None:
    """Where the scratch copy of a project goes: this user's own cache folder, never the
    shared temp folder, because uv looks above a project for a workspace root and another
    user could plant one (with a forged uv.lock) in /tmp."""
    import stat

    base = envguard_cache(os.environ)
    if base is None:
        return None
    folder = Path(base)
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        for place in (folder, folder.parent):
            st = place.lstat()
            if (
                not stat.S_ISDIR(st.st_mode)
                or st.st_uid != os.getuid()
                or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            ):
                return None
    except OSError:
        return None
    return folder


def _export_copy(
    project: Path,
    text: str,
    selection: Selection,
    *,
    where: str,
    parent: Path,
    settings: dict[str, Any],
) -> str:
    """uv's export of ``text`` as the uv.lock of a scratch copy of ``project``: its
    pyproject.toml and those of the path packages the lock names inside it (workspace
    members), nothing else."""
    import shutil
    import tempfile

    from envguard.compare.lockfiles.common import confined

    data = parse_toml(text, where=where)
    members = set()
    for pkg in data.get("package", []) if isinstance(data.get("package"), list) else []:
        source = pkg.get("source") if isinstance(pkg, dict) else None
        for kind in ("editable", "virtual", "directory"):
            rel = source.get(kind) if isinstance(source, dict) else None
            if isinstance(rel, str) and rel not in (".", "") and not os.path.isabs(rel):
                norm = os.path.normpath(rel)
                if not norm.startswith(".."):
                    members.add(norm)
    with tempfile.TemporaryDirectory(prefix="lock-", dir=parent) as scratch:
        root = Path(scratch)
        for rel in [".", *sorted(members)[:1000]]:
            source_file = project / rel / "pyproject.toml"
            try:
                if source_file.is_file():
                    confined(source_file, what="pyproject.toml of a workspace member")
                    (root / rel).mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source_file, root / rel / "pyproject.toml")
            except OSError as exc:  # a 300-character name, an unreadable member folder
                raise LockfileError(
                    f"{where}: a path package it names cannot be read ({exc.strerror or exc})"
                ) from None
        (root / "uv.lock").write_text(text, encoding="utf-8")
        return _export(root, selection, where=where, settings=settings)


# What `uv lock --check --offline` says of a lock that no longer satisfies pyproject.toml:
# the verdict itself when it can re-resolve from local sources, else the offline resolve it
# then attempts fails (it never needs the network to accept a lock that is up to date).
_STALE_SIGNS = (
    "needs to be updated",
    "network was disabled",
    "No solution found",
    "not found in the cache",
    "Failed to download",  # a url source, fetched again only when re-resolving
)
# ...unless what failed was building a path package to read its metadata: no verdict then.
_NO_VERDICT_SIGNS = ("Failed to build", "build-system.requires", "Failed to generate")


def _freshness(
    project: Path, *, where: str, settings: dict[str, Any]
) -> tuple[str | None, str | None]:
    """Whether the project's uv.lock is out of date with its pyproject.toml, as uv itself
    decides (`uv lock --check`, offline): (why it is stale, None), (None, None) when it is
    up to date, (None, a note) when uv could not tell offline."""
    # --no-build: a stale lock makes uv re-resolve, and a path package with an in-tree
    # build backend (`requires = []`) would run the project's code to read its metadata.
    proc = _run_uv(
        project,
        ["lock", "--check", "--no-build"],
        what="uv lock --check",
        where=where,
        settings=settings,
    )
    if proc.returncode == 0:
        return None, None
    said = proc.stderr.decode("utf-8", "replace")
    first = next((line for line in said.splitlines() if line.startswith("error:")), "")
    why = reason(ValueError(first.removeprefix("error:").strip())) if first else "no message"
    if any(sign in said for sign in _NO_VERDICT_SIGNS):
        return None, (
            f"whether {where} is up to date with pyproject.toml was not checked: uv could not"
            f" build a path package's metadata offline ({why})"
        )
    if any(sign in said for sign in _STALE_SIGNS):
        pyproject = Path(where).parent / "pyproject.toml"
        return f"{where} is out of date with {pyproject}: run `uv lock`", None
    raise LockfileError(f"{where}: uv lock --check failed ({why})")


def _export(project: Path, selection: Selection, *, where: str, settings: dict[str, Any]) -> str:
    args = ["export", "--frozen", "--format", "pylock.toml", "--no-header"]
    proc = _run_uv(
        project, [*args, *selection.uv_args()], what="uv export", where=where, settings=settings
    )
    if proc.returncode != 0:
        said = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        first = next((line for line in said if line.startswith("error:")), said[0] if said else "")
        why = reason(ValueError(first.removeprefix("error:").strip())) if first else "no message"
        selection_error = any(w in first.lower() for w in ("extra", "group", "package"))
        raise LockfileError(
            f"{where}: uv export refused it ({why})",
            hint="the same --extra/--group flags as for `uv sync`; see `uv export --help`"
            if selection_error
            else None,
        )
    if len(proc.stdout) > _EXPORT_CAP:
        raise LockfileError(f"{where}: uv export wrote over {_EXPORT_CAP >> 20} MiB")
    return proc.stdout.decode("utf-8", "replace")


def _run_uv(
    project: Path, args: list[str], *, what: str, where: str, settings: dict[str, Any]
) -> subprocess.CompletedProcess[bytes]:
    """uv ``args`` on ``project``, offline, without a shared cache, with only the resolver
    ``settings`` of its configuration (compare/lockfiles/uvsettings.py says why)."""
    import tempfile

    from envguard.compare.lockfiles.uvsettings import settings_toml
    from envguard.tools import find_modern_uv

    with tempfile.TemporaryDirectory(prefix="uv-settings-", dir=_private_folder()) as folder:
        config = Path(folder) / "uv.toml"
        config.write_text(settings_toml(settings), encoding="utf-8")
        argv = [
            find_modern_uv(),
            *args[:1],
            "--quiet",
            # The project may come from a pull request: of its uv.toml and [tool.uv], only
            # the resolver settings reach uv (the file above); --no-config also keeps uv
            # from running a .python-version path. A throwaway cache keeps uv from writing
            # anywhere; offline, it reaches no index a setting names.
            "--no-config",
            "--config-file",
            str(config),
            "--no-cache",
            "--offline",
            "--project",
            str(project),
            *args[1:],
        ]
        # Without downloads: `--frozen` reads the lock and never resolves, and `lock
        # --check` resolves only a lock that is already out of date.
        env = {
            k: v
            for k, v in user_environ().items()
            if not k.startswith("VIRTUAL_ENV") and k not in ("UV_CONFIG_FILE", "UV_NO_CONFIG")
        }
        env.update(UV_OFFLINE="1", UV_PYTHON_DOWNLOADS="never", UV_NO_PROGRESS="1")
        from envguard import trace

        started = trace.command(what, argv)
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                stdin=subprocess.DEVNULL,
                cwd=project,  # uv writes path sources relative to its working directory
                env=env,
                timeout=_EXPORT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise LockfileError(f"{where}: {what} took over {_EXPORT_SECONDS}s") from None
        except OSError as exc:
            raise LockfileError(f"{where}: cannot run uv ({exc.strerror or exc})") from None
    trace.done(what, started)
    return proc


def walk(
    data: dict[str, Any],
    *,
    where: str,
    base: Path,
    env: dict[str, str] | None,
    selection: Selection,
) -> dict[str, Pin]:
    """The packages uv would install, walked from the workspace roots by hand: the roots'
    dependencies, the selected extras and the selected dependency groups (``env`` None:
    every marker taken as true, the lock read for all its environments)."""
    packages = data.get("package")
    if not isinstance(packages, list):
        raise LockfileError(f"{where}: no [[package]] entries (is it a uv.lock?)")
    by_name: dict[str, list[dict[str, Any]]] = {}
    for pkg in packages:
        if not isinstance(pkg, dict) or not isinstance(pkg.get("name"), str):
            raise LockfileError(f"{where}: a [[package]] entry has no name")
        by_name.setdefault(canonicalize_name(pkg["name"]), []).append(pkg)

    def pick(name: str, version: str | None) -> dict[str, Any] | None:
        candidates = by_name.get(name, [])
        if version is not None:
            candidates = [c for c in candidates if c.get("version") == version] or candidates
        for cand in candidates:
            markers = cand.get("resolution-markers")
            if not markers or any(applies(m, env, where=where) for m in markers):
                return cand
        return candidates[0] if candidates else None

    members = _members(data, packages)
    roots, current = _roots(packages, members, selection)
    groups = _groups(base, selection, roots)
    pins: dict[str, Pin] = {}
    seen: set[tuple[str, str | None, tuple[str, ...]]] = set()
    stack: list[tuple[dict[str, Any], tuple[str, ...], bool]] = [(r, (), True) for r in roots]
    if not current and not selection.packages:  # a root without a project: the manifest's
        manifest = data.get("manifest")
        listed = manifest.get("dependency-groups") if isinstance(manifest, dict) else None
        top = {"name": "", "source": {"virtual": "."}, "dev-dependencies": listed or {}}
        stack.append((top, (), True))
    while stack:
        pkg, extras, is_root = stack.pop()
        name = canonicalize_name(pkg["name"])
        key = (name, pkg.get("version"), extras)
        if key in seen:
            continue
        seen.add(key)
        source: dict[str, Any] = pkg["source"] if isinstance(pkg.get("source"), dict) else {}
        left_out = (
            (is_root and selection.only_groups)
            or (selection.no_install_project and name in current)
            or (selection.no_install_workspace and name in members)
        )
        if "virtual" not in source and not left_out:
            pins[name] = _uv_pin(name, pkg, source, base, editable=not selection.no_editable)
        optional = pkg.get("optional-dependencies")
        optional = optional if isinstance(optional, dict) else {}
        if is_root:
            extras = tuple(optional) if selection.all_extras else selection.extras
        edges = [] if is_root and selection.only_groups else list(pkg.get("dependencies", []))
        for extra in extras:
            edges += optional.get(extra, [])
        if is_root:
            dev = pkg.get("dev-dependencies")
            dev = dev if isinstance(dev, dict) else {}
            edges += _group_edges(dev, groups)
        for edge in edges:
            if not isinstance(edge, dict) or not isinstance(edge.get("name"), str):
                raise LockfileError(f"{where}: {name}: a dependency has no name")
            if not applies(edge.get("marker"), env, where=where):
                continue
            target = pick(canonicalize_name(edge["name"]), edge.get("version"))
            if target is not None:
                stack.append((target, tuple(sorted(edge.get("extra", ()))), False))
    return pins


def _members(data: dict[str, Any], packages: list[Any]) -> set[str]:
    """The workspace's members: the lock's ``[manifest] members``, and every package it
    installs editable or that is virtual (a single project's lock has no manifest)."""
    manifest = data.get("manifest")
    listed = manifest.get("members") if isinstance(manifest, dict) else None
    found: set[str] = {canonicalize_name(m) for m in listed or () if isinstance(m, str)}
    for pkg in packages:
        source = pkg.get("source")
        if isinstance(source, dict) and ("editable" in source or "virtual" in source):
            found.add(canonicalize_name(pkg["name"]))
    return found


def _roots(
    packages: list[dict[str, Any]], members: set[str], selection: Selection
) -> tuple[list[dict[str, Any]], set[str]]:
    """Where `uv sync` starts, and the current project(s) (what --no-install-project leaves
    out): the --package members; every member for --all-packages; else the project at the
    lock's own folder, or every member when that root is no project (a virtual workspace)."""
    by_name: dict[str, dict[str, Any]] = {canonicalize_name(p["name"]): p for p in packages}
    names: list[str]
    current: set[str]
    at_root: list[str] = [
        n
        for n, p in by_name.items()
        if isinstance(p.get("source"), dict)
        and "." in (p["source"].get("editable"), p["source"].get("virtual"))
    ]
    if selection.packages:
        names = [canonicalize_name(n) for n in selection.packages]
        current = set(names)
    elif selection.all_packages:
        names, current = sorted(members), set(at_root)
    elif at_root:
        names, current = at_root, set(at_root)
    else:
        names, current = sorted(members), set()
    return [by_name[n] for n in names if n in by_name], current


def _group_edges(tables: dict[str, Any], groups: list[str] | None) -> list[Any]:
    """The edges of the chosen ``groups`` (None: all) of a ``dev-dependencies`` table."""
    chosen = sorted(tables) if groups is None else groups
    by_name = {canonicalize_name(g): e for g, e in tables.items()}
    return [
        e for g in dict.fromkeys(canonicalize_name(g) for g in chosen) for e in by_name.get(g, [])
    ]


def _groups(base: Path, selection: Selection, roots: list[dict[str, Any]]) -> list[str] | None:
    """The dependency groups `uv sync` installs (None: all of them), less --no-group and
    --no-dev."""
    left_out: set[str] = {canonicalize_name(g) for g in selection.no_groups}
    if selection.no_dev:
        left_out.add("dev")
    if selection.only_groups:
        return list(selection.only_groups)
    if selection.all_groups:
        chosen: list[str] | None = None
    else:
        chosen = list(selection.groups)
        if not selection.no_default_groups:
            defaults = _default_groups(base)
            chosen = None if defaults is None else chosen + defaults
    if chosen is None:
        if not left_out:
            return None
        chosen = sorted({str(g) for r in roots for g in r.get("dev-dependencies") or {}})
    return [g for g in chosen if canonicalize_name(g) not in left_out]


def _default_groups(base: Path) -> list[str] | None:
    """``[tool.uv] default-groups`` of the project beside the lock (uv's default: dev;
    None for "all")."""
    from envguard.compare.lockfiles.common import read_lockfile_text

    pyproject = base / "pyproject.toml"
    if not os.path.isfile(pyproject):
        return ["dev"]
    try:
        data = parse_toml(read_lockfile_text(pyproject), where=str(pyproject))
    except LockfileError:
        return ["dev"]
    tool = data.get("tool", {})
    found = tool.get("uv", {}).get("default-groups") if isinstance(tool, dict) else None
    if found == "all":
        return None
    if isinstance(found, list) and all(isinstance(g, str) for g in found):
        return list(found)
    return ["dev"]


def _uv_pin(
    name: str, pkg: dict[str, Any], source: dict[str, Any], base: Path, *, editable: bool = True
) -> Pin:
    """A pin labelled as uv's own pylock export labels it, so a walked lock and an exported
    one compare equal: ``git+URL@COMMIT`` for git, the archive URL for a url source, the
    file's or folder's ``file:`` URL for a path or directory source (``editable`` False:
    an editable one too, as `uv sync --no-editable` installs it)."""
    version = pkg.get("version")
    if "editable" in source and editable:
        return Pin(name=name, editable=str((base / str(source["editable"])).resolve()))
    for key, kind in (("editable", "directory"), ("directory", "directory"), ("path", "archive")):
        if isinstance(source.get(key), str):
            where = (base / source[key]).resolve()
            return Pin(name=name, version=version, url=where.as_uri(), kind=kind)
    if "git" in source:
        url, _, commit = str(source["git"]).partition("#")
        url = url.split("?", 1)[0]
        return Pin(
            name=name, version=version, url=f"git+{url}@{commit}" if commit else f"git+{url}"
        )
    if "url" in source:
        return Pin(name=name, version=version, url=str(source["url"]), kind="archive")
    return Pin(name=name, version=version)
