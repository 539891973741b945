"""`envguard --help` and `envguard --version` without loading typer (about half of the
screen's cost, nine tenths of the version's): the text typer prints at the usual width (a
terminal of 80 columns or more, or no terminal), kept here and held to typer's own
rendering by tests/cli/test_habits.py. A narrower terminal gets typer's rendering; so does
every other help."""

from __future__ import annotations

import os
import sys

# Regenerate after changing a command or its one-line help (the test says when):
#   COLUMNS=80 python -c "import sys; sys.argv=['envguard','--help']; \
#     from envguard.cli import main; main()"
TEXT = """\
Usage: envguard [OPTIONS] COMMAND [ARGS]...

  Snapshot, diff and rebuild ML training environments.

  Before a relaunch, diff is for a person (a report to read) and check is for
  CI (the same comparison as a gate: an exit code, annotations, a lockfile).

Options:
  --version      Show the version.
  -q, --quiet    Only errors and requested data (--format json, --out -).
  -v, --verbose  Also say what runs (probe, uv) and how long.
  --help         Show this message and exit.

After a good run:
  snapshot       Record the whole environment after a good run.
  show           Summarise one snapshot.
  log            Snapshots in time order, with metrics and what changed.
  list           Snapshots in snapshots/, newest first.

Before a relaunch:
  diff           What drifted since a snapshot, worst first, for a person.
  fit            Whether each extension using torch or CUDA can load.

Before an install:
  guard          Preview an install as drift; refuse it or run it.
  history        The guarded changes of a venv, newest first.
  protect        Route later pip and uv installs in the venv through guard.

After an incident:
  rebuild        Recreate the snapshot's packages with uv, atomically.
  restore        Bring back everything the snapshot knows, each verified.
  bisect         Find which drifted change or commit breaks the run.
  undo           Bring the venv back to before a guarded change.

Gates: CI and the cluster:
  check          The CI gate: drift from a snapshot or a lockfile fails it.
  fleet          Compare many hosts' snapshots; name the odd ones out.
  probe-payload  Print the probe as one script for a cluster's fan-out.
  gate           Stop a job unless every node runs one environment.

Files for other tools:
  schema         Print the JSON Schema of a snapshot or of a JSON output.
  export         Write a snapshot as pinned requirements.txt or pylock.toml.
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


def write(text: str = TEXT) -> int:
    """Write the screen (or ``text``); the exit status (141 when the reader has gone, as
    elsewhere)."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)  # nothing more to flush at exit
        return 141
    except OSError as exc:
        sys.stderr.write(f"error: cannot write the output: {exc.strerror or exc}\n")
        return 1
    return 0
