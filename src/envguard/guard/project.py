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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from envguard.errors import UsageError
from envguard.guard.command import InstallCommand
from envguard.guard.resolve import Resolution, from_uv_changes, read_output, start_reading
from envguard.reading import SMALL_CAP, not_json_constant

# Options of `uv add`/`uv remove` that choose what the sync after it installs: passed to
# the sync dry run (``--optional E`` installs extra E; see _selection()).
_SELECTION = {"--group": "--group", "--optional": "--extra", "--package": "--package"}
_SELECTION_FLAGS = ("--active", "--offline", "--no-config", "--dev")
# Files `uv add`/`uv remove` write: the project's (and its workspace's) manifest and lock.
_PROJECT_FILES = ("pyproject.toml", "uv.lock")


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
    if command.action == "sync":
        out = _run(argv, env=env, cwd=cwd, deadline=deadline, timeout=timeout, label="uv sync")
    else:
        with kept_as_they_are(_project_files(cwd)):
            _run(
                [uv, command.action, "--no-sync", *command.args],
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
    if "--no-sync" in command.args:  # the environment is left alone
        resolution = Resolution()
    return ProjectPreview(environment=Path(environment), resolution=resolution, argv=tuple(argv))


def _project_files(cwd: Path) -> list[Path]:
    """The files `uv add`/`uv remove` may write: pyproject.toml and uv.lock in ``cwd`` and
    every folder above it (a workspace member's lock is its root's), present or not."""
    out = []
    folder = cwd.absolute()
    for place in (folder, *folder.parents):
        out += [place / name for name in _PROJECT_FILES]
    return out


@contextlib.contextmanager
def kept_as_they_are(paths: list[Path]) -> Iterator[None]:
    """Put each of ``paths`` back as it was when the block ends: the same bytes and mode,
    or absent again."""
    from envguard.reading import read_bytes

    held: dict[Path, tuple[bytes, int] | None] = {}
    for path in paths:
        try:
            st = path.lstat()
        except FileNotFoundError:
            held[path] = None
            continue
        except OSError:
            continue  # a folder we cannot look into: uv cannot write there either
        if path.is_symlink() or not path.is_file():
            continue
        held[path] = (read_bytes(str(path), SMALL_CAP * 64), st.st_mode & 0o7777)
    try:
        yield
    finally:
        for path, was in held.items():
            _put_back(path, was)


def _put_back(path: Path, was: tuple[bytes, int] | None) -> None:
    from envguard.reading import read_bytes

    if was is None:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            if not path.is_symlink() and path.is_file():
                path.unlink()
        return
    data, mode = was
    with contextlib.suppress(OSError):
        if not path.is_symlink() and read_bytes(str(path), len(data) + 1) == data:
            return
    tmp = path.with_name(f".{path.name}.envguard-tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    os.replace(tmp, path)


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
