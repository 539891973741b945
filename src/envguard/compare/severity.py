"""How much a change matters (a plain enum: the policy needs it before pydantic loads)."""

from __future__ import annotations

from enum import Enum


class Severity(str, Enum):
    info = "info"
    warning = "warning"
    critical = "critical"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {Severity.info: 1, Severity.warning: 2, Severity.critical: 3}
