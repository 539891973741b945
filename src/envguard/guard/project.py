"""uv's project commands previewed: `uv add`, `uv remove` and `uv sync`.

uv has no dry run of `uv add` or `uv remove`; they edit pyproject.toml and uv.lock, then sync
the project's environment. The preview runs them with ``--no-sync`` (the environment is not
touched), asks ``uv sync --dry-run --output-format json --frozen`` what the sync would do,
and puts every project file back byte for byte, whatever happened meanwhile (an error, an
interrupt, the deadline). `uv sync` has a dry run of its own and edits nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from envguard.errors import ActionError, UsageError
from envguard.guard.command import InstallCommand
from envguard.guard.resolve import Resolution, from_uv_changes, read_output, start_reading
from envguard.lifecycle import signals_deferred
from envguard.reading import SMALL_CAP, not_json_constant, write_all
from envguard.toml_reading import toml_loads

# Options of `uv add`/`uv remove` that choose what the sync after it installs: passed to
# the sync dry run (``--optional E`` installs extra E; see _selection()).
_SELECTION = {"--group": "--group", "--optional": "--extra", "--package": "--package"}
_SELECTION_FLAGS = ("--active", "--offline", "--no-config", "--dev")
# Files `uv add`/`uv remove` write: the project's (and its workspace's) manifest and lock.
_PROJECT_FILES = ("pyproject.toml", "uv.lock")


class _Held(NamedTuple):
    """A project file as it was before the preview."""

    data: bytes
    st: os.stat_result


@dataclass(frozen=True)
class ProjectPreview:
    """What the command would do to the project environment at ``environment``."""

    environment: Path
    resolution: Resolution
    argv: tuple[str, ...]


def dry_run_argv(command: InstallCommand, *, uv: str) -> list[str]:
    """The `uv sync` dry run that says what ``command`` would change in the environment."""
    base = [uv, "sync", "--dry-run", "--output-format", "json"]
    if command.action == "sync":
        return [*base, *command.args]
    extra = ["--frozen", *_selection(command.args)]
    if command.action == "add":
        extra.append("--inexact")  # uv add keeps what it does not need; remove does not
    return [*base, *extra]


def _selection(args: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(args):
        option, eq, value = args[i].partition("=")
        if option in _SELECTION:
            if not eq and i + 1 < len(args):
                i += 1
                value = args[i]
            out += [_SELECTION[option], value]
        elif args[i] in _SELECTION_FLAGS:
            out.append(args[i])
        i += 1
    return out


def preview(
    command: InstallCommand, *, uv: str, env: Mapping[str, str], cwd: Path, timeout: float
) -> ProjectPreview:
    """What ``command`` would change in the project's environment; the project's files are
    as they were when this returns or raises."""
    import time

    deadline = time.monotonic() + timeout
    argv = dry_run_argv(command, uv=uv)
    syncs = syncs_after(command, env)
    if command.action == "sync":
        out = _run(argv, env=env, cwd=cwd, deadline=deadline, timeout=timeout, label="uv sync")
    else:
        # `--no-sync` twice, or beside --frozen (UV_FROZEN), is an error of uv's own.
        no_sync = ["--no-sync"] if syncs else []
        with kept_as_they_are(_project_files(cwd)):
            _run(
                [uv, command.action, *no_sync, *command.args],
                env=env,
                cwd=cwd,
                deadline=deadline,
                timeout=timeout,
                label=f"uv {command.action}",
            )
            out = _run(argv, env=env, cwd=cwd, deadline=deadline, timeout=timeout, label="uv sync")
    try:
        data = json.loads(out, parse_constant=not_json_constant)
        sync = data["sync"]
        environment = sync["environment"]["path"]
        if not isinstance(environment, str) or not os.path.isabs(environment):
            raise ValueError("no environment path")
        resolution = from_uv_changes(sync.get("changes"), requested=command.requested)
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise UsageError(
            f"the uv sync dry run said something envguard does not read ({exc})",
            hint="run it yourself to see it: " + " ".join(argv[1:6]),
        ) from None
    if not syncs:  # the environment is left alone
        resolution = Resolution()
    return ProjectPreview(environment=Path(environment), resolution=resolution, argv=tuple(argv))


# uv's boolean variables: what it reads as true (its BoolishValueParser).
_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})


def syncs_after(command: InstallCommand, env: Mapping[str, str]) -> bool:
    """Whether `uv add|remove` syncs the environment after it edits the project: not with
    --no-sync or --frozen, nor with UV_NO_SYNC or UV_FROZEN set true."""
    if command.action == "sync":
        return True
    if "--no-sync" in command.args or "--frozen" in command.args:
        return False
    return not any(env.get(v, "").strip().lower() in _TRUE for v in ("UV_NO_SYNC", "UV_FROZEN"))


def _project_files(cwd: Path) -> list[Path]:
    """The files `uv add`/`uv remove` may write: pyproject.toml and uv.lock in ``cwd`` and
    every folder above it (a workspace member's lock is its root's), present or not, and
    the pyproject.toml of every member of a workspace declared there (`--package`)."""
    out = []
    folder = cwd.absolute()
    for place in (folder, *folder.parents):
        out += [place / name for name in _PROJECT_FILES]
        out += _members(place)
    return out


# Workspace members held at most: a glob that matches more is not a uv workspace.
_MEMBERS_CAP = 4096


def _members(root: Path) -> list[Path]:
    """The pyproject.toml of each member ``root``'s pyproject.toml declares in
    [tool.uv.workspace] (its globs, as uv reads them); none when it declares none."""
    import itertools

    from envguard.reading import read_bytes

    try:
        text = read_bytes(str(root / "pyproject.toml"), _HELD_CAP).decode("utf-8")
        members = toml_loads(text)["tool"]["uv"]["workspace"]["members"]
    except (OSError, ValueError, KeyError, TypeError):  # TOMLDecodeError is a ValueError
        return []
    if not isinstance(members, list):
        return []
    out = []
    for pattern in members:
        if not isinstance(pattern, str) or not pattern or os.path.isabs(pattern):
            continue
        try:
            found = list(itertools.islice(root.glob(pattern), _MEMBERS_CAP))
        except (OSError, ValueError):  # a pattern pathlib does not take: uv refuses it too
            continue
        out += [member / "pyproject.toml" for member in found]
    return out[:_MEMBERS_CAP]


# The most a held file may be: uv.lock of a large monorepo is a few MB.
_HELD_CAP = SMALL_CAP * 64


@contextlib.contextmanager
def kept_as_they_are(paths: list[Path]) -> Iterator[None]:
    """Put each of ``paths`` back as it was when the block ends: the same bytes and mode,
    or absent again. A link is followed (uv writes through it): its target is held."""
    held = _held(paths)
    try:
        yield
    finally:
        # A second Ctrl-C must not stop the putting back halfway: held until it is done.
        with signals_deferred():
            failed = [(path, was) for path, was in held.items() if not _put_back(path, was)]
            if failed:
                raise _not_put_back(failed)


def _held(paths: list[Path]) -> dict[Path, _Held | None]:
    from envguard.reading import read_bytes

    held: dict[Path, _Held | None] = {}
    for path in paths:
        real = Path(os.path.realpath(path))
        if real in held:
            continue
        try:
            st = os.stat(real)
        except FileNotFoundError:
            if real.parent.is_dir():
                held[real] = None
            continue
        except OSError:
            continue  # a folder we cannot look into: uv cannot write there either
        if not stat.S_ISREG(st.st_mode):
            continue
        try:
            held[real] = _Held(read_bytes(str(real), _HELD_CAP), st)
        except OSError as exc:
            raise UsageError(
                f"{path}: cannot hold it to put it back after the preview"
                f" ({exc.strerror or exc}); nothing was run",
                hint="run the uv command without the guard",
            ) from None
    return held


def _put_back(path: Path, was: _Held | None) -> bool:
    """``path`` as it ``was`` (None: absent); False when it could not be written. It is
    written in place, as uv writes it: its owner, its links and a read-only folder stay."""
    from envguard.reading import read_bytes

    if was is None:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, NotADirectoryError):
            if not path.is_symlink() and path.is_file():
                path.unlink()
        return True
    data, mode = was.data, stat.S_IMODE(was.st.st_mode)
    with contextlib.suppress(OSError):
        if read_bytes(str(path), len(data) + 1) == data:
            _same_owner_and_mode(path, was.st)
            return True
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        try:
            write_all(fd, data)
        finally:
            os.close(fd)
    except OSError:
        try:  # not writable in place (uv replaced it): replaced as uv did
            tmp = path.with_name(f".{path.name}.envguard-tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        except OSError:
            return False
    _same_owner_and_mode(path, was.st)
    return True


def _same_owner_and_mode(path: Path, was: os.stat_result) -> None:
    """uv may have replaced the file (a new one, its runner's): its owner and mode back,
    as far as this user may set them."""
    with contextlib.suppress(OSError):
        now = path.stat()
        if (now.st_uid, now.st_gid) != (was.st_uid, was.st_gid):
            os.chown(path, was.st_uid, was.st_gid)
        if stat.S_IMODE(now.st_mode) != stat.S_IMODE(was.st_mode):
            path.chmod(stat.S_IMODE(was.st_mode))


def _not_put_back(failed: list[tuple[Path, _Held | None]]) -> ActionError:
    """The error for files the preview could not put back; their content before it is
    saved in a folder of its own."""
    import tempfile

    saved = Path(tempfile.mkdtemp(prefix="envguard-preview-"))
    for n, (path, was) in enumerate(failed):
        if was is not None:
            (saved / f"{n}-{path.name}").write_bytes(was.data)
    names = ", ".join(str(path) for path, _ in failed)
    return ActionError(
        f"the preview could not put back {names} as it was; nothing was installed",
        hint=f"its content before the preview is in {saved}",
    )


def _run(
    argv: list[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    deadline: float,
    timeout: float,
    label: str,
) -> bytes:
    proc = start_reading(argv, env, cwd=cwd)
    return read_output(proc, deadline, timeout=timeout, label=label)
