"""`envguard --help` without loading typer (about half of the screen's cost): the text
typer prints at the usual width (a terminal of 80 columns or more, or no terminal), kept
here and held to typer's own rendering by tests/cli/test_habits.py. A narrower terminal
gets typer's rendering; so does every other help."""

from __future__ import annotations

import os
import sys

# Regenerate after changing a command or its one-line help (the test says when):
#   COLUMNS=80 python -c "import sys; sys.argv=['envguard','--help']; \
#     from envguard.cli import main; main()"
TEXT = """\
Usage: envguard [OPTIONS] COMMAND [ARGS]...

  Snapshot, diff and rebuild ML training environments.

Options:
  --version      Show the version.
  -q, --quiet    Only errors and requested data (--format json, --out -).
  -v, --verbose  Also say what runs (probe, uv) and how long.
  --help         Show this message and exit.

Commands:
  snapshot       Record the whole environment after a good run.
  show           Summarise one snapshot.
  log            Snapshots in time order, with their metrics and what...
  list           Snapshots in snapshots/, newest first.
  schema         Print the JSON Schema of a snapshot file or of a...
  diff           What drifted since the known-good snapshot, worst first.
  check          The CI gate: fail when the environment or a lockfile...
  fit            Will each compiled extension load: its libraries and...
  fleet          Compare many hosts' snapshots: group identical ones,...
  probe-payload  Print the probe as one Python script for a cluster's own...
  gate           Stop a job before it starts unless every node runs one...
  rebuild        Recreate the snapshot's environment with uv: plan,...
  export         Write the snapshot as a pinned requirements.txt or a PEP...
  restore        Bring back everything the snapshot knows: packages,...
  bisect         Find which drifted change breaks the run, or show it is...
  guard          Preview an install as drift; refuse it, or run it and...
  history        The guarded changes of a venv, newest first.
  undo           Bring the venv back to before a guarded change (atomic...
  protect        Route later pip and uv installs in the venv through guard.
"""


def wide_enough() -> bool:
    """True when click would lay the help out at its widest (80 columns), as shutil does:
    $COLUMNS if set, else the terminal's width, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 80
    return columns >= 80


def write() -> int:
    """Write the screen; the exit status (141 when the reader has gone, as elsewhere)."""
    try:
        sys.stdout.write(TEXT)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)  # nothing more to flush at exit
        return 141
    except OSError as exc:
        sys.stderr.write(f"error: cannot write the output: {exc.strerror or exc}\n")
        return 1
    return 0
