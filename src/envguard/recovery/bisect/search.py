"""The search: the good environment with today's code first, then delta debugging
(ddmin) over the units, and with ``--repo`` the commits too, each cause named in the
verdict only once a run has shown it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from envguard.errors import ActionError
from envguard.recovery import commits
from envguard.recovery.bisect.changes import Unit
from envguard.recovery.bisect.check import Result
from envguard.recovery.bisect.report import BisectReport
from envguard.recovery.bisect.session import Session
from envguard.recovery.commits import FirstBadCommit, Worktree
from envguard.snapshots.models import Snapshot


def ddmin(
    items: Sequence[Unit],
    test: Callable[[frozenset[str]], Result],
    *,
    affordable: Callable[[frozenset[str]], bool],
) -> tuple[list[Unit], bool]:
    """Zeller's ddmin: a 1-minimal subset of ``items`` for which ``test`` is bad (all of
    them is bad). ``test`` takes unit ids; ``skip`` counts as not bad. (subset, complete):
    complete is False when a test was needed that ``affordable`` refused (the run budget
    ran out; a test already answered, in this run or a logged one, costs nothing)."""
    current = list(items)
    n = 2
    while len(current) >= 2:
        chunks = [current[i * len(current) // n : (i + 1) * len(current) // n] for i in range(n)]
        chunks = [c for c in chunks if c]
        reduced = False
        for group in (chunks, [[u for u in current if u not in c] for c in chunks]):
            for subset in group:
                ids = frozenset(u.id for u in subset)
                if not affordable(ids):
                    return current, False
                if test(ids) == "bad":
                    current = subset
                    n = 2 if group is chunks else max(n - 1, 2)
                    reduced = True
                    break
            if reduced:
                break
        if not reduced:
            if n >= len(current):
                break
            n = min(len(current), 2 * n)
    return current, True


def bisect(session: Session, *, max_steps: int, repo: Path | None = None) -> BisectReport:
    """The good environment with today's code first: when it runs good, ddmin over the
    units; when it runs bad, the code (or something else outside the environment) is a
    cause, and with ``repo`` both axes are tested apart, the drifted environment at the
    snapshot's commit and the commits in the good environment, so a guilty environment is
    never cleared by a guilty commit."""
    from envguard.compare.engine import diff
    from envguard.compare.policy import Policy

    good, bad = session.good, session.bad
    report = BisectReport(
        good=good.name,
        bad=bad.name,
        verdict="",
        units=[_unit_json(u) for u in session.all],
        other_drift=[c.message for c in diff(good, bad, Policy()).changes],
        log=str(session.log),
    )
    first = session.test(frozenset())
    if first == "skip":
        report.verdict = (
            f"the good snapshot's environment cannot run the command (skip:"
            f" {session.steps[-1].why}): fix the command first"
        )
    elif first == "bad" and repo is None:
        report.outcome = "outside_the_environment"
        report.verdict = (
            "the good snapshot's exact environment runs bad with today's code: a cause is"
            " outside the packages and variables (the code, files, data); the environment"
            " itself was not tested apart from the code: --repo tests it at the snapshot's"
            " commit and bisects the commits"
        )
        if not session.all:
            report.outcome = "not_the_environment"
            report.verdict = (
                "no package or variable drifted, and the good snapshot's exact environment"
                " runs bad with today's code: the environment is not the cause; look at the"
                " code (--repo bisects its commits), files, data"
            )
    elif first == "bad":
        assert repo is not None
        _both_axes(session, report, repo, max_steps=max_steps)
    elif not session.all:
        report.verdict = "no package or variable drifted: the environment is not the cause"
        report.outcome = "not_the_environment"
    else:
        _environment(session, report, max_steps=max_steps)
    _unreproduced(report, good, bad)
    report.steps = session.steps
    report.installs = session.installs
    return report


# Installed-file drift: bytes that no build from pins reproduces (an edit in site-packages,
# a library another package overwrote, a stray .pth).
_FILE_KINDS = frozenset(
    {"modified_in_place", "files_missing", "files_added", "clobbered", "owner_changed",
     "clash", "unowned_added"}
)  # fmt: skip


def _unreproduced(report: BisectReport, good: Snapshot, bad: Snapshot) -> None:
    """Never clear an environment whose installed files differ from what its packages
    installed: every run is a build from pins, which leaves those differences out."""
    from envguard.compare.engine import diff
    from envguard.compare.policy import Policy, only_sections

    found = [
        c.message
        for c in diff(good, bad, only_sections(Policy(), ("installed",))).changes
        if c.kind in _FILE_KINDS
    ]
    if not found:
        return
    said = "; ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    note = (
        f"the bad environment's installed files differ from what its packages installed,"
        f" which no bisect run reproduces (each is a build from pins): {said}; `envguard"
        " restore` puts them back, then run the check again"
    )
    if report.outcome == "not_the_environment":
        report.outcome = "undecided"
        report.verdict = (
            "the packages and variables are not the cause, "
            + report.verdict.removeprefix(_NOT_THE_CAUSE)
            + "; but "
            + note
        )
    else:
        report.verdict += "; also: " + note


_NOT_THE_CAUSE = "the environment is not the cause; "


def _unit_json(unit: Unit) -> dict[str, object]:
    return {"id": unit.id, "label": unit.label, "packages": list(unit.packages)}


def _environment(session: Session, report: BisectReport, *, max_steps: int) -> None:
    """The good environment runs good with today's code: which units make it bad."""
    every = frozenset(u.id for u in session.all)
    last = session.test(every)
    crash = ""
    if session.crashes_on_import(session.known[every]):
        last = "bad"
        crash = f"the bad environment crashes on import ({session.known[every].why}); "
    if last != "bad":
        why = session.known[every].why
        report.verdict = (
            f"the bad environment, rebuilt, runs {last}: the failure is not in the packages"
            " or variables (look at files, caches, the driver, the code)"
            if last == "good"
            else f"the bad environment, rebuilt, could not be judged (skip: {why}): see the"
            " log, or judge by exit status"
        )
        if last == "good":
            report.outcome = "not_the_environment"
        return
    found, report.complete = _narrow(session, frozenset(), max_steps=max_steps)
    report.outcome = "culprits"
    report.culprits = [_unit_json(u) for u in found]
    report.verdict = crash + _named(found, report.complete, of=len(session.all), limit=max_steps)


def _narrow(
    session: Session, at: frozenset[str], *, max_steps: int, cwd: Callable[[], Path] | None = None
) -> tuple[list[Unit], bool]:
    """ddmin over the units, each run with ``at`` (a commit's key) added to its step and in
    the folder ``cwd`` gives (a worktree checked out there), or the user's folder. Then,
    while the budget lasts, within each guilty install's group: a check keyed on one of
    the packages it pulled in names that package, not the install and all it pulled in."""

    def test(ids: frozenset[str]) -> Result:
        return session.test(ids | at, cwd=cwd() if cwd else None)

    def affordable(ids: frozenset[str]) -> bool:
        return session.affordable(ids | at, max_steps)

    def within(group: Unit, others: frozenset[str]) -> list[Unit]:
        parts = session.parts(group)
        inner, done = ddmin(
            parts,
            lambda ids: test(ids | others),  # the other culprits: still needed to be bad
            affordable=lambda ids: affordable(ids | others),
        )
        return inner if done and len(inner) < len(parts) else [group]

    found, complete = ddmin(session.all, test, affordable=affordable)
    if not complete:
        return found, False
    out: list[Unit] = []
    for unit in found:
        others = frozenset(u.id for u in found if u is not unit)
        out.extend(within(unit, others) if unit.id.startswith("group:") else [unit])
    return out, True


def _named(found: Sequence[Unit], complete: bool, *, of: int, limit: int) -> str:
    """The culprit units as the verdict says them."""
    if complete:
        together = " together" if len(found) > 1 else ""
        return f"it is{together}: " + "; ".join(u.label for u in found)
    shown = "; ".join(u.label for u in found[:3])
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return (
        f"not narrowed down within {limit} runs: {len(found)} of {of}"
        f" changes still suspected ({shown}{more})"
    )


def _both_axes(session: Session, report: BisectReport, repo: Path, *, max_steps: int) -> None:
    """The good environment runs bad with today's code: the code is a cause. Its first bad
    commit is searched in the good environment; whether the environment is a cause too is
    decided by running the drifted environment at the snapshot's commit (a run kept in
    the budget for it), and when it is, its units are searched at that commit."""
    good_head = commits.recorded_head(session.good, repo)
    unclean = " (uncommitted changes are not tested)" if commits.dirty(repo) else ""
    todo = commits.since(repo, good_head)
    at = frozenset({commits.key(good_head)})
    with commits.worktree(repo, good_head) as tree:

        def at_good() -> Path:
            return tree.checkout(good_head)

        base = session.test(at, cwd=at_good())
        if base == "skip":
            report.verdict = (
                f"the good environment at the snapshot's own commit {good_head[:12]} could"
                f" not be judged (skip: {session.known[at].why}): fix the command first"
            )
            return
        if base == "bad":
            report.verdict = (
                f"the good environment at the snapshot's own commit {good_head[:12]} runs"
                " bad too: neither the environment nor the code since explains the failure;"
                " look at data, hardware or nondeterminism"
            )
            return
        # The commits first: they run in the good environment, already built. With
        # uncommitted changes, HEAD is not known bad (today's code was): it is run first.
        if unclean and todo and _run_at(session, tree, todo[-1]) == "good":
            todo = []  # the committed code is good: the uncommitted changes are the cause
        reserve = 1 if session.all else 0
        code = _first_bad_commit(session, tree, todo, max_steps=max_steps - reserve)
        report.commit = code
        env = "good"  # nothing drifted: innocent without a run
        every = frozenset(u.id for u in session.all)
        if every:
            env = session.test(every | at, cwd=at_good())
            if session.crashes_on_import(session.known[every | at]):
                env = "bad"
        if code is None:
            said = (
                "the uncommitted changes in the checkout (its committed code runs good in"
                " the good environment)"
                if unclean
                else "the repo is at the snapshot's commit, which runs good in a worktree:"
                " look at what else differs in the folder bisect ran from"
            )
        else:
            where = "" if code.exact else f" (after {max_steps} runs, somewhere up to)"
            said = f"the first bad commit{where}: {code.short} {code.subject}{unclean}"
            said += _unjudged(code)
        report.complete = code is None or code.exact
        if env == "good":
            report.outcome = "not_the_environment"
            report.verdict = (
                _NOT_THE_CAUSE
                + (
                    "nothing in its packages or variables drifted"
                    if not every
                    else "the drifted environment runs good at the snapshot's commit"
                    f" {good_head[:12]}"
                )
                + f"; {said}"
            )
            return
        if env == "skip":
            report.verdict = (
                f"{said}; whether the environment is a cause too is undecided: at the"
                f" snapshot's commit it could not be judged (skip: {session.known[every | at].why})"
            )
            report.complete = False
            return
        found, complete = _narrow(session, at, max_steps=max_steps, cwd=at_good)
    report.complete = report.complete and complete
    report.outcome = "both"
    report.culprits = [_unit_json(u) for u in found]
    labels = "; ".join(u.label for u in found) + (", together" if len(found) > 1 else "")
    envs = (
        f"the environment ({labels})"
        if complete
        else f"the environment ({_named(found, complete, of=len(session.all), limit=max_steps)})"
    )
    if code is not None:
        where = "" if code.exact else f" (or one before it: {max_steps} runs ran out)"
        said = f"commit {code.short} '{code.subject}'{where}{unclean}{_unjudged(code)}"
    report.verdict = (
        f"two causes: {envs} and {said} (the drifted environment runs bad at the snapshot's"
        f" commit {good_head[:12]}; the good environment runs bad with today's code)"
    )


def _unjudged(code: FirstBadCommit) -> str:
    n = code.skipped
    return f" (or one of the {n} commits before it that could not be judged)" if n else ""


def _run_at(session: Session, tree: Worktree, commit: str) -> Result:
    """The good environment's run at ``commit``."""
    return session.test(frozenset({commits.key(commit)}), cwd=tree.checkout(commit))


def _first_bad_commit(
    session: Session, tree: Worktree, todo: list[str], *, max_steps: int
) -> FirstBadCommit | None:
    """The first commit of ``todo`` that runs bad in the good environment (the last is
    known bad: the good environment runs bad with today's code)."""
    if not todo:
        return None
    culprit, exact, skipped = commits.first_bad(
        todo,
        lambda commit: _run_at(session, tree, commit),
        affordable=lambda c: session.affordable(frozenset({commits.key(c)}), max_steps),
    )
    short, _, subject = tree.subject(culprit).partition(" ")
    return FirstBadCommit(sha=culprit, short=short, subject=subject, exact=exact, skipped=skipped)


def failed_build(exc: ActionError) -> ActionError:
    return ActionError(f"a candidate environment did not build: {exc.message}", hint=exc.hint)
