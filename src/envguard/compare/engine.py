"""The one change engine: every section's comparison, collected under one policy."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from envguard.compare.models import Change, ChangeGroup, Drift, Severity
from envguard.compare.names import SECTIONS
from envguard.compare.policy import Policy
from envguard.compare.sections import BY_NAME, REGISTRY
from envguard.redact import redact_text
from envguard.snapshots.models import MetricValue, Snapshot


class Collector:
    """Collects one section's changes, applying the policy's severity overrides."""

    def __init__(
        self,
        policy: Policy,
        *,
        section: str,
        file: str | None = None,
        lines: Mapping[str, int] | None = None,
    ) -> None:
        self.policy = policy
        self.section = section
        # A lockfile's changes point at it: ``lines`` maps a name to the line pinning it.
        self.file = file
        self.lines = lines or {}
        self.changes: list[Change] = []

    def add(
        self,
        kind: str,
        name: str,
        *,
        expected: object = None,
        actual: object = None,
        severity: Severity,
        message: str,
    ) -> None:
        """One change; ``severity`` is the default that ``[tool.envguard.severity]`` may
        override for this section or section.kind. Its text is redacted here, once, for every
        output format: it quotes snapshots and lockfiles (a URL with credentials in a pin)."""
        # Built without re-validation: every field is a str (or None) made just above, or
        # the policy's Severity; a 100,000-package drift makes 100,000 of these.
        self.changes.append(
            Change.model_construct(
                section=self.section,
                kind=kind,
                name=redact_text(name),
                expected=None if expected is None else redact_text(str(expected)),
                actual=None if actual is None else redact_text(str(actual)),
                severity=self.policy.level(self.section, kind, severity),
                message=redact_text(message),
                file=self.file,
                line=self.lines.get(name) if self.file is not None else None,
            )
        )

    def finding(
        self,
        kind: str,
        name: str,
        *,
        message: str,
        known: bool,
        expected: object = None,
        actual: object = None,
    ) -> None:
        """A fact of the live side that may not load or run (a library, an extension, a
        split pair): critical when new, info when the good snapshot already had it (the
        good run ran so, and an untouched venv must match its own snapshot)."""
        self.add(
            kind,
            name,
            expected=expected,
            actual=actual,
            severity=Severity.info if known else Severity.critical,
            message=message + (" (as in the good snapshot)" if known else ""),
        )


def sort_changes(changes: Iterable[Change]) -> tuple[Change, ...]:
    """Critical first, then by section order and name: stable, deterministic output."""
    order = {s: i for i, s in enumerate(SECTIONS)}
    return tuple(
        sorted(changes, key=lambda c: (-c.severity.rank, order.get(c.section, 99), c.name, c.kind))
    )


# New warnings told as notes, at most; the rest are counted.
MAX_WARNING_NOTES = 10


def diff(expected: Snapshot, actual: Snapshot, policy: Policy | None = None) -> Drift:
    """Every change from ``expected`` (the good run) to ``actual``, worst first; the
    warnings ``actual`` gives that ``expected`` did not, as its notes."""
    policy = policy or Policy()
    changes: list[Change] = []
    for section in REGISTRY:
        if section.name not in policy.ignore_sections:
            collector = Collector(policy, section=section.name)
            section.compare(collector, expected, actual)
            changes += collector.changes
    notes = new_warnings(expected, actual)
    if not changes:
        return clean_drift(expected.name, actual.name, expected.metrics, notes=notes)
    from envguard.compare.causes import CAUSED_KINDS, group_changes
    from envguard.compare.verdict import verdict

    # Grouped on the packages' own names; shown (like every change) redacted: a name or a
    # version from a snapshot may hold a token.
    shown = {c.name for c in changes if c.section == "packages" and c.kind in CAUSED_KINDS}
    caused = {
        name
        for name in expected.package_map().keys() | actual.package_map().keys()
        if redact_text(name) in shown
    }
    causes = group_changes(actual, caused) if caused else []
    member_of: dict[str, list[str]] = {}
    for cause in causes:
        for name in (cause.root, *cause.members):
            member_of.setdefault(redact_text(name), []).append(redact_text(cause.root))
    if member_of:
        changes = [
            c.model_copy(update={"groups": tuple(member_of[c.name])})
            if c.section == "packages" and c.name in member_of
            else c
            for c in changes
        ]
    # Built without validation, as every Change above: each field is typed here.
    return Drift.model_construct(
        changes=sort_changes(changes),
        metrics=dict(expected.metrics),
        expected_name=expected.name,
        actual_name=actual.name,
        notes=notes,
        verdict=tuple(
            redact_text(line) for line in verdict(expected, actual, changes, causes, policy)
        ),
        groups=tuple(
            ChangeGroup.model_construct(
                root=redact_text(c.root), members=tuple(redact_text(m) for m in c.members)
            )
            for c in causes
        ),
    )


def clean_drift(
    expected_name: str | None,
    actual_name: str | None,
    metrics: Mapping[str, MetricValue],
    *,
    notes: tuple[str, ...] = (),
) -> Drift:
    """A Drift without changes (no verdict, no groups): the good run's metrics beside it."""
    return Drift.model_construct(
        changes=(),
        metrics=dict(metrics),
        expected_name=expected_name,
        actual_name=actual_name,
        notes=notes,
    )


def new_warnings(expected: Snapshot, actual: Snapshot) -> tuple[str, ...]:
    """The warnings of ``actual``'s probe that ``expected``'s did not give, as notes: what
    it could not read or check this time (bytecode files past the quick check's compile
    time, a RECORD gone, a check that ran out of time, a folder it could not read). Not
    changes: what was not looked at is not drift, and an untouched venv gives none; but a
    verdict of no drift is only as good as what was looked at, and is said with them.
    A warning is new when none of ``expected``'s reads the same but for its numbers: "168
    bytecode files were not compared" is the caveat the good snapshot gave as "3351 ..."
    (a fresh cache, as a CI runner has, at both), no news; nor one naming the venv's own
    path, where the other names its."""
    import re

    digits = re.compile(r"\d+")

    def shape(warning: str, prefix: str) -> str:  # (a venv copied elsewhere: its own path)
        return digits.sub("#", warning.replace(prefix, "<prefix>") if prefix else warning)

    before = {shape(w, expected.interpreter.prefix) for w in expected.warnings}
    fresh = [w for w in actual.warnings if shape(w, actual.interpreter.prefix) not in before]
    notes = [redact_text(f"new warning: {w}") for w in fresh[:MAX_WARNING_NOTES]]
    if len(fresh) > MAX_WARNING_NOTES:
        notes.append(f"and {len(fresh) - MAX_WARNING_NOTES} more new warnings")
    return tuple(notes)


def restore_hints(changes: Iterable[Change], snapshot: Snapshot) -> list[str]:
    """What a package rebuild does not restore, each with the command that would (as text,
    never run): the sections' own restore hints."""
    hints = []
    for change in changes:
        section = BY_NAME.get(change.section)
        hint = section.restore_hint(change, snapshot) if section is not None else None
        if hint is not None:
            hints.append(hint)
    return hints
