"""How much a change matters, and changes grouped by it: a plain enum and a function, which
the policy and the renderers of a kept clean answer (compare.identical) need without
pydantic."""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum

TYPE_CHECKING = False  # typing is not loaded for a command's start

if TYPE_CHECKING:
    from envguard.compare.identical import Clean
    from envguard.compare.models import Change, Drift


class Severity(str, Enum):
    info = "info"
    warning = "warning"
    critical = "critical"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {Severity.info: 1, Severity.warning: 2, Severity.critical: 3}


def iter_sections(drift: Drift | Clean) -> Iterator[tuple[Severity, list[Change]]]:
    """Changes grouped by severity, critical first."""
    for level in (Severity.critical, Severity.warning, Severity.info):
        group = [c for c in drift.changes if c.severity is level]
        if group:
            yield level, group
