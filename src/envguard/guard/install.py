"""Running the guarded command itself: as given (an argv, never a shell), with the venv
active, to its end. An interrupt meanwhile is held until the installer is done, so the venv
is left as it was or as the install leaves it, never half-way; then it stops envguard."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from envguard.errors import UsageError
from envguard.lifecycle import Interrupted, forget, signals_deferred, start_child
from envguard.tools import find_uv, is_protect_shim, which


def find_program(name: str, env: Mapping[str, str]) -> str:
    """``name`` as the command would find it on its own PATH; UsageError when missing.
    Never protect's uv shim: the guard runs the installer itself, and the shim would hand
    it back to the guard (the uv PATH finds past it, else envguard's own)."""
    found = shutil.which(name, path=env.get("PATH"))
    if found is not None and is_protect_shim(found):
        found = which(os.path.basename(found), path=env.get("PATH")) or find_uv()
    if found is None:
        raise UsageError(f"{name}: not found on PATH (nor in the venv's bin/)")
    return found


def check_program(tool: str, program: str, venv: Path) -> None:
    """pip must be the venv's own: another interpreter's pip would change another
    environment than the one previewed."""
    if tool == "pip" and not _same_folder(Path(program).parent, venv / "bin"):
        raise UsageError(
            f"{venv}: the venv has no {Path(program).name} of its own ({program} would"
            " install into another environment)",
            hint="use uv pip install, or python -m pip with pip in the venv",
        )


def _same_folder(a: Path, b: Path) -> bool:
    """``a`` and ``b`` are one folder (``.venv/bin`` is ``/project/.venv/bin``)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def run_install(
    argv: tuple[str, ...], env: Mapping[str, str], *, stdout_to_stderr: bool = False
) -> tuple[int, int | None]:
    """Run ``argv``: (its exit status, 128 + N when a signal N ended it; the signal that
    came meanwhile, or None). Its input and output are envguard's; ``stdout_to_stderr``:
    its standard output goes to envguard's standard error."""
    program = find_program(argv[0], env)
    code, signum = 1, None
    try:
        with signals_deferred():  # Ctrl-C: the install finishes, then envguard stops
            proc = start_child(
                [program, *argv[1:]], env=dict(env), stdout=2 if stdout_to_stderr else None
            )
            try:
                code = proc.wait()
            finally:
                forget(proc.pid)
    except Interrupted as exc:  # raised as the block ends: the install is over
        signum = exc.signum
    return (code if code >= 0 else 128 - code), signum
