"""The probe started before the command line loads: prestart().

`envguard snapshot` and `envguard diff` start their probe from here (envguard.prestart) while
typer and pydantic load, so this module imports only what building the request and
starting the probe need: what else the command needs loads beside the running probe (a
snapshot's store and models, api.capture itself).
"""

from __future__ import annotations

from envguard.errors import EnvguardError

TYPE_CHECKING = False  # typing itself loads once the probe runs
if TYPE_CHECKING:
    from typing import Literal


def prestart(
    command: Literal["snapshot", "diff", "check", "guard", "undo"],
    *,
    good: str | None = None,
    python: str | None = None,
    boot: str | None = None,
    early: bool = True,
) -> None:
    """Start the probe that ``snapshot(python=python)`` or ``diff(good, python=python)``
    (local, nothing else named) is about to need, so that it runs while the caller loads
    what it needs (the command line: typer). That call takes the probe over when it asks
    for exactly the same one, and stops it otherwise. Nothing is reported here: a problem
    (no such snapshot, no interpreter) is the call's to report.

    ``boot``: the interpreter that probe will run, when the caller can tell it already;
    it starts first, with the target package (probe.booting.boot), and loads that while
    what builds the probe's argument is imported here. ``early`` False: only that boot
    (the command's probe, whatever its argument, takes the interpreter over)."""
    if boot is not None:
        from envguard.lifecycle import suppress  # contextlib's import is not on the way
        from envguard.probe import booting

        with suppress(OSError, ValueError):
            booting.boot(boot)  # no such interpreter: the command says so
    if not early:
        return
    from envguard.snapshots.measure import Measure, capture_request
    from envguard.snapshots.request import start_early

    try:
        if command in ("guard", "undo") and python is not None:
            # start_document(python=the venv's python, name="guard"), as both begin with it
            start_early(capture_request(Measure(python=python), name="guard"))
        elif command == "snapshot":
            start_early(capture_request(Measure(python=python), name=None, command=()))
        else:
            # diff's, not snapshot's: loaded only on its path
            from envguard.snapshots import store
            from envguard.snapshots.live import PRESTART_BYTES, prestart_like

            path = store.resolve(good) if good is not None else store.newest()
            if path.stat().st_size <= PRESTART_BYTES:  # a huge one: not parsed twice
                prestart_like(store.read(path), source=str(path), python=python)
    except (EnvguardError, OSError, ValueError):
        return
