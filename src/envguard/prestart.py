"""Start the probe before the command line's libraries load.

``envguard snapshot``, ``diff`` and ``check`` spend most of their start-up importing typer;
the probe they need can run meanwhile. This reads argv only far enough to guess that probe
(the command, ``--python``, the snapshot named) and starts it (api.prestart). The command,
once typer has parsed it, takes the probe over only when it asks for exactly that one
(snapshots.request.start_early): a wrong guess costs CPU, never a wrong answer. Anything
else in argv (another option, ``--via``, ``--help``, ``-v``) means no guess.

It also reads a snapshot's argv whole when typer is not needed for it (plain_snapshot:
envguard.recording.run_plain runs such a snapshot without typer), and boots the
interpreter of one whose probe it cannot guess (a repo, a file named: _boot_plain).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not loaded for a command's start
if TYPE_CHECKING:
    from typing import Any

# Options that do not change what the command's probe measures (their values are skipped;
# --python's is the guess), and flags that do not either. Any other option means no guess.
# tests/cli/test_prestart.py holds both to typer's options: each one here is an option of
# that command with the same arity, and each option typer has is here or named there as one
# that means no guess.
VALUED = {
    "snapshot": frozenset(
        {"--python", "--name", "--out", "-o", "--metric", "--note", "--timeout", "--jobs"}
    ),
    "diff": frozenset({"--python", "--format", "--fail-on", "--only"}),
    # check without a lock is diff's comparison as a gate: the same probe.
    "check": frozenset({"--python", "--format", "--fail-on", "--only"}),
    # guard and undo probe the venv (--venv, else $VIRTUAL_ENV, else ./.venv) first.
    "guard": frozenset(
        {"--venv", "--allow", "--fail-on", "--timeout", "--keep", "--format", "--wait"}
    ),
    "undo": frozenset(
        {
            "--venv",
            "--index-url",
            "--extra-index-url",
            "--find-links",
            "--torch-index",
            "--keep-backups",
            "--format",
            "--wait",
        }
    ),
}
FLAGS = {
    "snapshot": frozenset({"--force", "--no-force", "-q", "--quiet"}),
    "diff": frozenset({"--expand", "-q", "--quiet"}),
    "check": frozenset({"--expand", "--inexact", "-q", "--quiet"}),
    "guard": frozenset({"--preview", "--shell", "--force", "--allow-build", "-q", "--quiet"}),
    "undo": frozenset(
        {
            "--offline",
            "--no-offline",
            "--no-index",
            "--in-place",
            "--no-in-place",
            "--force",
            "-q",
            "--quiet",
        }
    ),
}


def guess(argv: list[str]) -> tuple[str, str | None, str | None] | None:
    """(command, its --python, the snapshot it names) when ``argv`` is plainly a local
    ``snapshot`` or ``diff``; else None."""
    if not argv or argv[0] not in VALUED:
        return None
    command, python, positional = argv[0], None, []
    valued, flags = VALUED[command], FLAGS[command]
    i = 1
    while i < len(argv):
        arg = argv[i]
        i += 1
        if command == "guard" and (arg == "--" or not arg.startswith("-")):
            break  # the install command (or the snapshot before it) follows
        if arg in valued:  # --python X, -o X
            if i >= len(argv):
                return None
            name, value = arg, argv[i]
            i += 1
        elif arg.startswith("--") and arg.partition("=")[0] in valued:  # --python=X
            name, _, value = arg.partition("=")
        elif arg in flags:
            continue
        elif arg.startswith("-"):
            return None  # anything else may change what is measured (--via, --repo, --help)
        else:
            positional.append(arg)
            continue
        if name in ("--python", "--venv"):
            python = value
    if command in ("guard", "undo"):
        found = _venv_python(python)
        return (command, found, None) if found is not None else None
    if len(positional) > (0 if command == "snapshot" else 1):
        return None
    if command in ("diff", "check") and not positional:
        return None  # the newest snapshot: finding it reads them all, once is enough
    return command, python, positional[0] if positional else None


# A snapshot these options alone describe runs without typer (envguard.recording.run_plain):
# option -> the name it is read into (GATHERED ones repeat into a list); each flag -> its
# name and value. Anything else in argv (--via, --hosts, a number, a positional, "--",
# "-oFILE", a value that looks like an option) is left to typer. tests/cli/test_plain.py
# holds the reading to typer's own.
PLAIN_VALUED = {
    "--python": "python",
    "--name": "name",
    "--out": "out",
    "-o": "out",
    "--note": "note",
    "--metric": "metric",
    "--repo": "repo",
    "--file": "file",
    "--cache": "cache",
    "--root": "root",
    "--store": "store",
}
GATHERED = ("metric", "repo", "file", "cache")
PLAIN_FLAGS = {
    "--force": ("force", True),
    "--no-force": ("force", False),
    "--keep-files": ("keep_files", True),
    "--no-keep-files": ("keep_files", False),
    "--keep-cache": ("keep_cache", True),
    "--no-keep-cache": ("keep_cache", False),
    "--deep": ("deep", True),
    "--no-deep": ("deep", False),
    "-q": ("quiet", True),
    "--quiet": ("quiet", True),
}


def plain_snapshot(argv: list[str]) -> dict[str, Any] | None:
    """The options of ``argv`` when it is ``snapshot`` with only PLAIN_VALUED and
    PLAIN_FLAGS (read as click reads them: the last of a repeated option wins, a GATHERED
    one gathers); else None."""
    import os

    if not argv or argv[0] != "snapshot" or "_ENVGUARD_COMPLETE" in os.environ:
        return None
    options: dict[str, Any] = dict.fromkeys(set(PLAIN_VALUED.values()) - set(GATHERED))
    options.update({key: [] for key in GATHERED})
    options.update({key: False for key, _ in PLAIN_FLAGS.values()})
    i = 1
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg in PLAIN_FLAGS:
            key, flag = PLAIN_FLAGS[arg]
            options[key] = flag
            continue
        name, eq, value = arg.partition("=")
        if name not in PLAIN_VALUED or (eq and not name.startswith("--")):
            return None
        if not eq:
            if i >= len(argv):
                return None
            value = argv[i]
            i += 1
        if value.startswith("-") and value != "-":
            return None  # click takes it as the value; a mistyped option more likely
        key = PLAIN_VALUED[name]
        if key in GATHERED:
            options[key].append(value)
        else:
            options[key] = value
    return options


def _venv_python(venv: str | None) -> str | None:
    """The interpreter guard and undo probe: the venv's, as api.guarding names it; None
    when it is not a venv (the command refuses it before running anything in it)."""
    import os
    from pathlib import Path

    chosen = Path(venv if venv is not None else os.environ.get("VIRTUAL_ENV") or ".venv")
    where = chosen.expanduser().absolute()
    if not (where / "pyvenv.cfg").is_file():
        return None
    return str(where / "bin" / "python")


def _plain_python(command: str, python: str | None) -> str | None:
    """The interpreter a ``snapshot`` or ``diff`` probes, spelled as
    interpreters.resolve_python names it, when os.path alone tells it plainly: --python
    (a file or a venv), else (a snapshot) $VIRTUAL_ENV's or ./.venv's; None otherwise (a
    diff measures its snapshot's interpreter; python3 on PATH). Only what is booted early
    (booting.boot): a name spelled otherwise than the probe's is a boot stopped unused."""
    import os

    def plain(path: str) -> str | None:  # pathlib's spelling, without importing pathlib
        return None if path.startswith("~") or ".." in path.split("/") else os.path.normpath(path)

    def venv(folder: str) -> str | None:
        for rel in ("bin/python", "bin/python3"):
            if os.path.exists(os.path.join(folder, rel)):
                return os.path.join(folder, rel)
        return None

    if python:
        if python.startswith("~"):
            return None  # resolve_python expands it (a folder named "~" is not it)
        path = plain(python if os.path.isabs(python) else os.path.join(os.getcwd(), python))
        return venv(path) if path is not None and os.path.isdir(path) else path
    if command != "snapshot":
        return None
    active = os.environ.get("VIRTUAL_ENV")
    if active:
        folder = plain(active)
        if folder is None:
            return None
        found = venv(folder)
        if found is not None:
            return found
    return venv(os.path.join(os.getcwd(), ".venv"))


def start(argv: list[str]) -> None:
    """Start the probe ``argv``'s command will need, if it can be told from argv alone."""
    try:
        guessed = guess(argv)
    except OSError:  # the working folder is gone (a venv named relative to it)
        return
    if guessed is None:
        _boot_plain(argv)
        return
    command, python, good = guessed
    # The interpreter itself starts first when argv names it plainly (api.prestart's boot).
    try:
        boot = python if command in ("guard", "undo") else _plain_python(command, python)
    except OSError:  # the working folder is gone: no guess (the command says so)
        boot = None
    from envguard import api

    try:
        api.prestart(command, good=good, python=python, boot=boot)  # type: ignore[arg-type]
    except Exception:  # a guess: the command itself reports what is wrong
        return


def _boot_plain(argv: list[str]) -> None:
    """A plain snapshot whose probe is not guessed (it names a repo, a file, a cache, a
    root, --deep): its interpreter booted now all the same (probe.booting), which the
    command's probe takes over with its own argument; the check's preparation is kept when
    that argument reads the same there."""
    options = plain_snapshot(argv)
    if options is None:
        return
    try:
        boot = _plain_python("snapshot", options["python"])
    except OSError:  # the working folder is gone: the command says so
        return
    if boot is not None:
        from envguard import api

        try:
            api.prestart("snapshot", python=options["python"], boot=boot, early=False)
        except Exception:  # a guess: the command itself reports what is wrong
            return


def stop() -> None:
    """Stop a probe started here that the command did not take over (it ended early), and
    one interrupted between its start and its registration as an early probe."""
    import contextlib
    import sys

    # Each step on its own: this runs on the way out of an interrupt, which may have come
    # at any point of the start (a half-registered probe): one failing step must neither
    # keep the other from running nor hide the interrupt behind a traceback.
    request = sys.modules.get("envguard.snapshots.request")
    if request is not None:
        with contextlib.suppress(Exception):
            request.stop_early()
    booting = sys.modules.get("envguard.probe.booting")
    if booting is not None:
        with contextlib.suppress(Exception):
            booting.stop_boots()
    lifecycle = sys.modules.get("envguard.lifecycle")
    if lifecycle is not None:
        with contextlib.suppress(Exception):
            lifecycle.kill_running()
