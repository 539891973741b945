"""`envguard bisect`: which of the drift's changes turns a good run bad, and, with
``--repo``, which commit; a cause is only cleared by a run that shows it innocent.

The units are the drift's groups: the torch stack (torch, triton, the nvidia-* libraries)
as one, each install with what it pulled in (compare/causes.py), each remaining package
change, and the environment variables as one. A candidate is the good snapshot with some
units taken from the bad side; it is built as exact pins with uv into one scratch venv
(reused: uv changes only what differs, and a run that needs the same units as the last
builds nothing), and the user's command judges it. Delta debugging (ddmin) finds the
smallest set of units that is bad: about 2*log2(units) runs for one culprit, and
interactions (bad only together) are found too. The code axis (recovery/commits.py) runs
commits in the good environment and the drifted environment at the snapshot's commit.
"""

from __future__ import annotations

from envguard.recovery.bisect.changes import CACHE_VARIABLES, Unit, candidate, units
from envguard.recovery.bisect.check import (
    Check,
    Result,
    Verdict,
    check_from,
    judge,
    metric_value,
    run_check,
)
from envguard.recovery.bisect.report import BisectReport, Step
from envguard.recovery.bisect.search import bisect, ddmin, failed_build
from envguard.recovery.bisect.session import Session, log_folder, log_path, read_log

__all__ = [
    "CACHE_VARIABLES",
    "BisectReport",
    "Check",
    "Result",
    "Session",
    "Step",
    "Unit",
    "Verdict",
    "bisect",
    "candidate",
    "check_from",
    "ddmin",
    "failed_build",
    "judge",
    "log_folder",
    "log_path",
    "metric_value",
    "read_log",
    "run_check",
    "units",
]
