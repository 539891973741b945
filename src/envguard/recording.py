"""What `envguard snapshot` does once its options are read, on one host: the snapshot
measured, its warnings said, the file written (or the document on standard output). The
typer command (cli/capture.py) runs it; so does run_plain(), which runs a plain snapshot
(prestart.plain_snapshot: the options read from argv alone) without loading typer at all:
importing typer and the click it vendors is about a third of the CPU a snapshot's own
process spends, while the probe needs both cores."""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not loaded for a command's start
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path
    from typing import Any

    from envguard.snapshots.measure import Measure
    from envguard.snapshots.models import MetricValue


def record(
    where: Measure,
    *,
    name: str | None,
    out: str | None,
    force: bool,
    command: Sequence[str],
    repos: Sequence[str | Path] = (),
    files: Sequence[str] = (),
    caches: Sequence[str] = (),
    metrics: Mapping[str, MetricValue] | None = None,
    note: str | None = None,
    keep_files: bool = False,
    keep_cache: bool = False,
    store: str | None = None,
) -> None:
    """Snapshot what ``where`` names and write it to ``out`` (None: the store's default
    path, named ``name`` or a timestamp; "-": standard output); ``keep_files`` and
    ``keep_cache`` keep the files' contents and the compile caches in ``store``."""
    from envguard import api
    from envguard.errors import UsageError
    from envguard.terminal import data_out, echo

    if (keep_files or keep_cache) and out == "-" and store is None:
        raise UsageError("--out - with --keep-files or --keep-cache needs --store DIR")
    if out not in (None, "-") and "{host}" not in out:
        api.check_writable(out, force=force)  # fail before the slow capture
    elif out is None and name:
        api.check_writable(api.default_path(name), force=force)
    measured: dict[str, Any] = {
        "measure": where,
        "name": name,
        "repos": repos,
        "files": files,
        "caches": caches,
        "metrics": dict(metrics or {}),
        "note": note,
        "command": tuple(command),
    }
    if keep_files or keep_cache:
        from envguard.snapshots.blobs import store_for

        snap = api.snapshot(**measured)
        target = out if out not in (None, "-") else api.default_path(snap.name)
        doc = api.keep(
            snap,
            store=store if store is not None else store_for(str(target)),
            files=keep_files,
            caches=keep_cache,
            measure=where,
        ).model_dump(mode="json")
    else:
        # written as it is: no models to build; what writing it needs loads meanwhile
        doc = api.snapshot_document(**measured, meanwhile=_load_writing)
    _print_warnings(doc["warnings"])
    from envguard.snapshots.signing import signed
    from envguard.snapshots.store import dumps

    if out == "-":
        data_out().write(dumps(signed(doc)))
        return
    written = api.save(doc, out, force=force, unique=name is None and out is None, sign=True)
    from envguard.render.text import printable, snapshot_summary_line

    echo(printable(f"wrote {written}: {snapshot_summary_line(doc)}"))


def _load_writing() -> None:
    """What writing a snapshot and its line needs, loaded beside the running probe."""
    from envguard.render import text  # noqa: F401
    from envguard.snapshots import signing  # noqa: F401


def _print_warnings(warnings: Sequence[str]) -> None:
    """The first ten of the snapshot's warnings on stderr, one line each."""
    from envguard.terminal import quiet, say

    if not warnings or quiet():
        return
    for warning in warnings[:10]:
        say("warning", warning)
    if len(warnings) > 10:
        say("warning", f"... {len(warnings) - 10} more, listed in the snapshot")


def run_plain(options: Mapping[str, Any], argv: Sequence[str]) -> int:
    """`envguard snapshot` with ``options`` (prestart.plain_snapshot's reading of
    ``argv``), run as the typer program runs it (cli/program.py: the same messages, the
    same exit codes, standard output guarded the same way, -q the same); the exit code."""
    from envguard import terminal
    from envguard.errors import EnvguardError
    from envguard.lifecycle import Interrupted, received_signal
    from envguard.tools import own_variable

    own_variable("PYDANTIC_DISABLE_PLUGINS", "__all__")  # as program.main: no plugin scan
    terminal.begin_run()
    if terminal.working_folder_gone():
        return 2
    terminal.guard_output()
    terminal.loudness(quiet=options["quiet"], verbose=False)
    terminal.listen()
    try:
        from pathlib import Path

        from envguard.snapshots.measure import Measure
        from envguard.snapshots.request import parse_metric

        metrics = dict(parse_metric(m) for m in options["metric"])
        record(
            Measure(python=options["python"], root=options["root"], deep=options["deep"]),
            name=options["name"],
            out=options["out"],
            force=options["force"],
            command=("envguard", *argv),
            repos=[Path(repo) for repo in options["repo"]],
            files=options["file"],
            caches=options["cache"],
            metrics=metrics,
            note=options["note"],
            keep_files=options["keep_files"],
            keep_cache=options["keep_cache"],
            store=options["store"],
        )
    except terminal.OutputFailed as exc:
        return terminal.output_failed(exc)
    except EnvguardError as exc:
        signum = received_signal()
        if signum is not None:  # a lost interrupt made this error: say the cause
            return terminal.interrupted(signum)
        terminal.report(exc)
        return exc.exit_code
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP (lifecycle.Interrupted)
        import signal

        return terminal.interrupted(exc.signum if isinstance(exc, Interrupted) else signal.SIGINT)
    signum = received_signal()
    return 0 if signum is None else terminal.interrupted(signum)
