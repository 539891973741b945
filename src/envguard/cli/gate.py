"""`envguard gate`: the rank gate on a launcher line, before the job starts."""

import os
import sys
from typing import Annotated

import typer

from envguard.cli.program import GATES, app, fail
from envguard.terminal import quiet


@app.command(context_settings={"allow_interspersed_args": False}, rich_help_panel=GATES)
def gate(
    command: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[-- COMMAND...]", help="Run this once the gate passes (it replaces envguard)."
        ),
    ] = None,
    torchrun: Annotated[
        bool,
        typer.Option(
            "--torchrun",
            help="COMMAND is a torchrun line (torchrun or python -m torch.distributed.run):"
            " one participant per node, read as torchrun reads its options and PET_*"
            " variables (the gate listens on the rendezvous port + 1).",
        ),
    ] = False,
    snapshot: Annotated[
        str | None, typer.Option(help="Also require the environment this snapshot recorded.")
    ] = None,
    env: Annotated[
        list[str] | None,
        typer.Option(help="Variables that must match, as patterns [default: NCCL_*] (repeatable)."),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            help="Seconds to wait for the others [default: ENVGUARD_GATE_TIMEOUT or 120]."
        ),
    ] = None,
) -> None:
    """Stop a job unless every node runs one environment.

    Before the job starts, on the launcher line; exit 1 if the nodes differ.
    """
    from envguard import distributed

    if torchrun and not command:
        fail("--torchrun needs the torchrun command line after --")
    patterns = tuple(env) if env else distributed.DEFAULT_ENV
    if torchrun:
        assert command is not None
        mine = distributed.gate_launch(command, snapshot=snapshot, env=patterns, timeout=timeout)
    else:
        mine = distributed.assert_homogeneous(snapshot, env=patterns, timeout=timeout)
    if not quiet():
        sys.stderr.write(f"envguard gate: passed ({mine.digest[:12]})\n")
    if command:
        sys.stderr.flush()
        try:
            os.execvp(command[0], command)  # noqa: S606  # the user's own command, as argv
        except OSError as exc:
            fail(f"cannot run {command[0]}: {exc.strerror or exc}")
