"""`envguard diff`, `check` and `fleet`."""

import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from envguard.cli.program import BEFORE_A_RELAUNCH, GATES, Deep, OutputFormat, app, console, measure
from envguard.terminal import data_out, quiet

if TYPE_CHECKING:
    from envguard.compare.identical import Clean
    from envguard.compare.models import Drift
    from envguard.compare.policy import Policy
    from envguard.compare.selection import Selection
    from envguard.snapshots.measure import Measure


class DriftFormat(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"
    github = "github"
    html = "html"


def _default_format(fmt: DriftFormat | None) -> DriftFormat:
    """GitHub annotations under GitHub Actions, a table elsewhere: the same for diff and check."""
    import os

    if fmt is not None:
        return fmt
    return DriftFormat.github if os.environ.get("GITHUB_ACTIONS") == "true" else DriftFormat.table


def _emit_drift(
    drift: "Drift | Clean", fmt: DriftFormat, *, policy: "Policy", expand: bool = False
) -> None:
    import os

    from envguard.compare.identical import Clean

    if fmt is not DriftFormat.json and not quiet():
        from envguard.render.text import printable

        for note in drift.notes:  # how the lock was read: said on stderr, never in the data
            sys.stderr.write(f"note: {printable(note)}\n")
    # A kept clean answer (Clean) is written without the models, in every format but the page.
    if fmt is DriftFormat.json:
        from envguard.render.json import drift_json

        data_out().write(drift_json(drift))
    elif fmt is DriftFormat.html:
        from envguard.render.html import drift_html

        # the page is written from the model
        data_out().write(drift_html(drift.drift() if isinstance(drift, Clean) else drift))
    elif fmt is DriftFormat.markdown:
        from envguard.render.markdown import drift_markdown

        data_out().write(drift_markdown(drift))
    elif fmt is DriftFormat.github:
        from envguard.render.github import drift_github, drift_outputs
        from envguard.render.markdown import drift_markdown
        from envguard.render.text import printable, summary

        data_out().write(
            drift_github(
                drift,
                workspace=os.environ.get("GITHUB_WORKSPACE"),
                policy=policy,
                step_summary=bool(os.environ.get("GITHUB_STEP_SUMMARY")),
            )
        )
        for line in (*drift.verdict, summary(drift)):
            data_out().write(printable(line) + "\n")
        for variable, text in (
            ("GITHUB_STEP_SUMMARY", drift_markdown(drift) + "\n"),
            ("GITHUB_OUTPUT", drift_outputs(drift)),
        ):
            target = os.environ.get(variable)
            if target:
                _append_to(variable, target, text)
    elif isinstance(drift, Clean) or not drift.changes:  # no table (nor rich's import)
        _say_clean(drift)
    else:
        from envguard.render.table import drift_table

        drift_table(drift, console(), expand=expand)


def _say_clean(drift: "Drift | Clean") -> None:
    from envguard.render.text import metrics_footer, printable, summary

    typer.echo(printable(summary(drift)))
    footer = metrics_footer(drift)
    if footer:
        typer.echo(printable(footer))


def _load_summary() -> None:
    """What every drift's output says first (its notes, its summary line), loaded beside
    the running probe. rich (a table of changes) is not: a clean diff never needs it."""
    from envguard.render import text  # noqa: F401


def _append_to(variable: str, target: str, text: str) -> None:
    """Append ``text`` to the file GitHub named in ``variable``: a regular file only (a
    FIFO would block the gate, a folder or full disk would end it in a traceback); when it
    cannot be written, a warning says so and the gate's verdict stands."""
    import os
    import stat

    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(target, flags, 0o644)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(0, "not a regular file")
            data = text.encode("utf-8")
            while data:
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)
    except OSError as exc:
        from envguard.render.text import printable

        why = exc.strerror or str(exc)
        sys.stderr.write(printable(f"warning: ${variable} {target}: not written ({why})") + "\n")


def _exit(drift: "Drift | Clean", policy: "Policy") -> NoReturn:
    if not drift.changes:  # no change fails any policy: the sections are not loaded for it
        raise typer.Exit(0)
    from envguard.compare.layers import fails

    raise typer.Exit(1 if fails(policy, (c.severity for c in drift.changes)) else 0)


Allow = Annotated[
    list[Path] | None,
    typer.Option(
        help="Also read files, caches and repos the snapshot names under this folder"
        " [default: only the cwd, its work tree and the cache folders] (repeatable)."
    ),
]
Root = Annotated[
    str | None,
    typer.Option(
        help="Where the checkout holding the tracked files lies now (another clone, a"
        " container's path) [default: where it was, else the cwd's work tree]."
    ),
]
Format = Annotated[
    DriftFormat | None,
    typer.Option("--format", help="[default: github under GitHub Actions, else table]"),
]
Expand = Annotated[
    bool,
    typer.Option(
        "--expand", help="List every package an install pulled in (folded into its row by default)."
    ),
]
Extra = Annotated[
    list[str] | None, typer.Option("--extra", help="Lock selection as for `uv sync` (repeatable).")
]
AllExtras = Annotated[bool, typer.Option("--all-extras", help="Every extra of the lock.")]
Group = Annotated[
    list[str] | None, typer.Option("--group", help="Also this dependency group (repeatable).")
]
OnlyGroup = Annotated[
    list[str] | None, typer.Option("--only-group", help="Only this dependency group (repeatable).")
]
NoDefaultGroups = Annotated[
    bool, typer.Option("--no-default-groups", help="Leave out the default groups.")
]
AllGroups = Annotated[bool, typer.Option("--all-groups", help="Every dependency group.")]
Package = Annotated[
    list[str] | None,
    typer.Option("--package", help="Only this workspace member (uv.lock; repeatable)."),
]
NoGroup = Annotated[
    list[str] | None,
    typer.Option("--no-group", help="Leave out this dependency group (uv.lock; repeatable)."),
]
NoDev = Annotated[bool, typer.Option("--no-dev", help="Leave out group dev (uv.lock).")]
AllPackages = Annotated[
    bool, typer.Option("--all-packages", help="Every workspace member (uv.lock).")
]
NoInstallProject = Annotated[
    bool,
    typer.Option(
        "--no-install-project", help="As `uv sync --no-install-project`: not the project itself."
    ),
]
NoInstallWorkspace = Annotated[
    bool,
    typer.Option(
        "--no-install-workspace",
        help="As `uv sync --no-install-workspace`: no workspace member, the root included.",
    ),
]
NoEditable = Annotated[
    bool,
    typer.Option(
        "--no-editable", help="As `uv sync --no-editable`: path packages installed as built."
    ),
]


def _selection(
    extra: list[str] | None,
    all_extras: bool,
    *,
    group: list[str] | None,
    only_group: list[str] | None,
    no_default_groups: bool,
    all_groups: bool,
    package: list[str] | None,
    no_group: list[str] | None,
    no_dev: bool,
    all_packages: bool,
    no_install_project: bool,
    no_install_workspace: bool,
    no_editable: bool,
) -> "Selection":
    from envguard.compare.selection import Selection

    return Selection(
        extras=tuple(extra or ()),
        all_extras=all_extras,
        groups=tuple(group or ()),
        only_groups=tuple(only_group or ()),
        no_default_groups=no_default_groups,
        all_groups=all_groups,
        packages=tuple(package or ()),
        no_groups=tuple(no_group or ()),
        no_dev=no_dev,
        all_packages=all_packages,
        no_install_project=no_install_project,
        no_install_workspace=no_install_workspace,
        no_editable=no_editable,
    )


class FailLevel(str, Enum):
    critical = "critical"
    warning = "warning"
    info = "info"
    never = "never"


FailOn = Annotated[
    FailLevel | None,
    typer.Option(
        "--fail-on", help="The lowest severity that fails [default: warning, or [tool.envguard]]."
    ),
]


def _lock_pair(
    lock: list[str] | None,
    good: str | None,
    *,
    policy: "Policy",
    selection: "Selection",
    measure: "Measure",
) -> "Drift | None":
    """What changing lockfile OLD to NEW does when ``--lock`` came twice; None when it came
    once or not at all. More than twice is a usage error: which two would be a guess."""
    from envguard import api
    from envguard.errors import UsageError

    if not lock or len(lock) == 1:
        return None
    if len(lock) > 2:
        raise UsageError(
            f"--lock came {len(lock)} times: give it once (the lock to check) or twice"
            " (OLD then NEW)"
        )
    return api.diff_locks(
        lock[0],
        lock[1],
        policy=policy,
        selection=selection,
        good=good,
        measure=measure,
    )


Only = Annotated[list[str] | None, typer.Option(help="Compare only this section (repeatable).")]
Timeout = Annotated[float, typer.Option(help="Seconds allowed per call through --via.")]


@app.command(rich_help_panel=BEFORE_A_RELAUNCH)
def diff(
    snapshot_ref: Annotated[
        str | None,
        typer.Argument(metavar="[SNAPSHOT]", help="Path or name [default: newest in snapshots/]."),
    ] = None,
    against: Annotated[
        str | None, typer.Option(help="Compare with this snapshot instead of the live environment.")
    ] = None,
    python: Annotated[
        str | None, typer.Option(help="Measure this interpreter or venv [default: the snapshot's].")
    ] = None,
    format: Format = None,
    fail_on: FailOn = None,
    only: Only = None,
    via: Annotated[
        str | None, typer.Option(help="Measure through this command prefix ('ssh gpu01').")
    ] = None,
    allow: Allow = None,
    root: Root = None,
    lock: Annotated[
        list[str] | None,
        typer.Option(
            help="Twice: what changing lockfile OLD to NEW does ('-' reads one from stdin);"
            " once: as check --lock."
        ),
    ] = None,
    extra: Extra = None,
    all_extras: AllExtras = False,
    group: Group = None,
    only_group: OnlyGroup = None,
    no_default_groups: NoDefaultGroups = False,
    all_groups: AllGroups = False,
    package: Package = None,
    no_group: NoGroup = None,
    no_dev: NoDev = False,
    all_packages: AllPackages = False,
    no_install_project: NoInstallProject = False,
    no_install_workspace: NoInstallWorkspace = False,
    no_editable: NoEditable = False,
    expand: Expand = False,
    timeout: Timeout = 120.0,
    deep: Deep = False,
) -> None:
    """What drifted since a snapshot, worst first, for a person.

    A verdict to read in ten seconds, then the details; exit 1 on drift. In CI, check is
    the same comparison as a gate.
    """
    from envguard import api

    policy = api.load_policy(fail_on=fail_on.value if fail_on else None, only=only or ())
    chosen = _selection(
        extra,
        all_extras,
        group=group,
        only_group=only_group,
        no_default_groups=no_default_groups,
        all_groups=all_groups,
        package=package,
        no_group=no_group,
        no_dev=no_dev,
        all_packages=all_packages,
        no_install_project=no_install_project,
        no_install_workspace=no_install_workspace,
        no_editable=no_editable,
    )
    where = measure(python=python, via=via, timeout=timeout, allow=allow, root=root, deep=deep)
    pair = _lock_pair(lock, snapshot_ref, policy=policy, selection=chosen, measure=where)
    drift: Drift | Clean
    if pair is not None:
        drift = pair
    elif lock:
        drift = api.check(
            snapshot_ref, lock=lock[0], policy=policy, selection=chosen, measure=where
        )
    else:  # a clean live side may come back without its model (compare.identical)
        from envguard.api.compare import diff_result

        drift = diff_result(
            snapshot_ref, against, policy=policy, measure=where, meanwhile=_load_summary
        )
    _emit_drift(drift, _default_format(format), policy=policy, expand=expand)
    _exit(drift, policy)


@app.command(rich_help_panel=GATES)
def check(
    snapshot_ref: Annotated[
        str | None,
        typer.Argument(metavar="[SNAPSHOT]", help="Path or name [default: newest in snapshots/]."),
    ] = None,
    lock: Annotated[
        list[str] | None,
        typer.Option(
            help="Check against uv.lock, pylock.toml or requirements.txt ('-': stdin); with"
            " --python or --via and no SNAPSHOT, the live environment is checked. Twice:"
            " what changing lockfile OLD to NEW does."
        ),
    ] = None,
    find_lock: Annotated[
        bool,
        typer.Option(
            "--find-lock",
            help="Use the lockfile beside the nearest pyproject.toml (uv.lock, pylock.toml,"
            " requirements.txt).",
        ),
    ] = False,
    against: Annotated[str | None, typer.Option(help="Compare with this snapshot.")] = None,
    python: Annotated[str | None, typer.Option(help="Measure this interpreter or venv.")] = None,
    via: Annotated[
        str | None, typer.Option(help="Measure through this command prefix ('ssh gpu01').")
    ] = None,
    format: Format = None,
    fail_on: FailOn = None,
    only: Only = None,
    allow: Allow = None,
    root: Root = None,
    extra: Extra = None,
    all_extras: AllExtras = False,
    group: Group = None,
    only_group: OnlyGroup = None,
    no_default_groups: NoDefaultGroups = False,
    all_groups: AllGroups = False,
    package: Package = None,
    no_group: NoGroup = None,
    no_dev: NoDev = False,
    all_packages: AllPackages = False,
    no_install_project: NoInstallProject = False,
    no_install_workspace: NoInstallWorkspace = False,
    no_editable: NoEditable = False,
    inexact: Annotated[
        bool,
        typer.Option(
            "--inexact",
            help="As `uv sync --inexact`: packages the lock does not list are info, not drift"
            " ([tool.envguard] inexact = true).",
        ),
    ] = False,
    expand: Expand = False,
    timeout: Timeout = 120.0,
    deep: Deep = False,
) -> None:
    """The CI gate: drift from a snapshot or a lockfile fails it.

    Exit 1 on drift; under GitHub Actions, annotations on the lockfile line. diff is the
    same comparison for a person to read.
    """
    from dataclasses import replace

    from envguard import api

    policy = api.load_policy(fail_on=fail_on.value if fail_on else None, only=only or ())
    if inexact:
        policy = replace(policy, inexact=True)
    chosen = _selection(
        extra,
        all_extras,
        group=group,
        only_group=only_group,
        no_default_groups=no_default_groups,
        all_groups=all_groups,
        package=package,
        no_group=no_group,
        no_dev=no_dev,
        all_packages=all_packages,
        no_install_project=no_install_project,
        no_install_workspace=no_install_workspace,
        no_editable=no_editable,
    )
    if find_lock and not lock:
        lock = [str(api.find_lock())]
    where = measure(python=python, via=via, timeout=timeout, allow=allow, root=root, deep=deep)
    pair = _lock_pair(lock, snapshot_ref, policy=policy, selection=chosen, measure=where)
    if pair is None and not lock:  # as diff: a clean live side may come back without a model
        from envguard.api.compare import diff_result

        found: Drift | Clean = diff_result(
            snapshot_ref, against, policy=policy, measure=where, meanwhile=_load_summary
        )
    else:
        found = pair or api.check(
            snapshot_ref,
            lock=lock[0] if lock else None,
            against=against,
            policy=policy,
            selection=chosen,
            measure=where,
        )
    _emit_drift(found, _default_format(format), policy=policy, expand=expand)
    _exit(found, policy)


class FleetFormat(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"
    html = "html"


@app.command(rich_help_panel=BEFORE_A_RELAUNCH)
def fit(
    python: Annotated[str | None, typer.Option(help="Measure this interpreter or venv.")] = None,
    via: Annotated[
        str | None, typer.Option(help="Measure through this command prefix ('ssh gpu01').")
    ] = None,
    format: Annotated[OutputFormat, typer.Option("--format")] = OutputFormat.table,
    timeout: Timeout = 120.0,
) -> None:
    """Whether each extension using torch or CUDA can load.

    Its libraries and symbols against torch's and CUDA's, and its GPU archs against this
    node's GPU, from the files. Exit 1 when one cannot.
    """
    from envguard import api
    from envguard.compare.sections.fit import no_kernel

    snap = api.fit(measure=measure(python=python, via=via, timeout=timeout))
    found = snap.fit
    if found is None:  # a probe always answers it; kept for the type
        raise typer.Exit(2)
    warnings = snap.warnings
    gpu = [message for _, message in no_kernel(snap)]
    if format is OutputFormat.json:
        from envguard.render.json import fit_json

        data_out().write(fit_json(found, warnings=warnings, no_kernel=gpu))
    else:
        from envguard.render.table import fit_table

        fit_table(found, console(), warnings=warnings, no_kernel=gpu)
    raise typer.Exit(1 if found.broken or gpu else 0)


@app.command(rich_help_panel=GATES)
def fleet(
    refs: Annotated[
        list[str],
        typer.Argument(
            metavar="SNAPSHOTS...|DIR|STREAM",
            help="Snapshot or report files, folders of them, or an engine's output (clush,"
            " pdsh, srun --label; '-': stdin) of `envguard probe-payload` run on each node.",
        ),
    ],
    baseline: Annotated[
        str | None, typer.Option(help="Mark hosts that differ from this snapshot.")
    ] = None,
    hosts: Annotated[
        str | None,
        typer.Option(help="h1,h2,... or @hostfile: the hosts expected; a silent one is a row."),
    ] = None,
    format: Annotated[FleetFormat, typer.Option("--format")] = FleetFormat.table,
) -> None:
    """Compare many hosts' snapshots; name the odd ones out.

    Identical environments are grouped; a node that failed is a row, exit 1 when hosts
    differ.
    """
    from envguard import api

    report = api.fleet(refs, baseline=baseline, hosts=hosts)
    if format is FleetFormat.json:
        from envguard.render.json import fleet_json

        data_out().write(fleet_json(report))
    elif format is FleetFormat.html:
        from envguard.render.html import fleet_html

        data_out().write(fleet_html(report))
    elif format is FleetFormat.markdown:
        from envguard.render.markdown import fleet_markdown

        data_out().write(fleet_markdown(report))
    else:
        from envguard.render.table import fleet_table

        fleet_table(report, console())
    raise typer.Exit(0 if report.agree else 1)


@app.command("probe-payload", rich_help_panel=GATES)
def probe_payload(
    file: Annotated[
        list[str] | None, typer.Option(help="A file to hash on each node (repeatable).")
    ] = None,
    cache: Annotated[
        list[str] | None, typer.Option(help="A cache directory to measure (repeatable).")
    ] = None,
) -> None:
    """Print the probe as one script for a cluster's fan-out.

    srun, clush, pdsh or Ansible run it on each node; it needs only Python there.
    """
    from envguard import api

    data_out().write(api.probe_payload(files=file or (), caches=cache or ()))
