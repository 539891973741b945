"""envguard protect: pip in this venv installs through `envguard guard`.

Written into a protected venv's site-packages by `envguard protect` (with a .pth line that
imports it at every start of the venv's Python) and removed by `envguard protect --off`.
`pip install`, `pip uninstall` and `python -m pip ...` of them are handed to `envguard
guard`, which previews them and runs them or refuses. What the guard runs itself carries
ENVGUARD_GUARD_DEPTH (guard/nesting.py): it goes through at once, before anything else is
read, so a guard never starts itself again. Anything else returns at once. Standard library
only, Python 3.8+; without sys.orig_argv (Python before 3.10) only the bin/pip scripts are
covered.
"""

import os
import sys

# Filled in by `envguard protect` when it writes this file into the venv.
VENV = ""
ENVGUARD = ["python3", "-m", "envguard"]

# Interpreter options that take a value: `python -W ignore -m pip`.
_VALUED = {"-W", "-X", "-Q"}


def pip_arguments(argv):  # type: (list[str]) -> tuple[list[str], list[str]] | None
    """(how pip was started, its arguments) when ``argv`` (sys.orig_argv) starts pip."""
    i = 1
    while i < len(argv) and argv[i].startswith("-") and argv[i] not in ("-m", "-c", "-"):
        i += 2 if argv[i] in _VALUED else 1
    if i + 1 < len(argv) and argv[i] == "-m" and argv[i + 1] == "pip":
        return ["python", "-m", "pip"], argv[i + 2 :]
    if i < len(argv) and _is_pip_script(os.path.basename(argv[i])):
        return ["pip"], argv[i + 1 :]
    return None


def _is_pip_script(name):  # type: (str) -> bool
    """pip, pip3, pip3.12 (without re: this runs at every start of the venv's Python)."""
    return name in ("pip", "pip3") or (name.startswith("pip3.") and name[5:].isdigit())


def inside_guard():  # type: () -> bool
    """Started by `envguard guard` (its dry run, its install): a count of guards above."""
    value = os.environ.get("ENVGUARD_GUARD_DEPTH", "").strip()
    return value.isdigit() and value.isascii() and int(value) > 0


def route():  # type: () -> None
    if inside_guard() or not VENV:
        return
    argv = getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]
    found = pip_arguments(list(argv))
    if found is None:
        return
    how, args = found
    # Wherever the word stands (after pip's own options too): what guard cannot read, it
    # refuses, so a misread is a refusal, never a way round.
    if "install" not in args and "uninstall" not in args:
        return
    command = [*ENVGUARD, "guard", "--venv", VENV, "--", *how, *args]
    sys.stdout.flush()
    os.execv(command[0], command)


try:
    route()
except OSError as exc:  # envguard is gone: say so, and let pip refuse nothing silently
    sys.stderr.write("envguard protect: cannot run envguard (%s); pip stopped\n" % exc)
    sys.exit(2)
