"""What bisect found (BisectReport, the schema `envguard schema bisect` writes) and the
steps it took to find it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Literal

from envguard.recovery.bisect.check import Result
from envguard.recovery.commits import FirstBadCommit


@dataclass
class Step:
    """One build and run: which units were applied, what the command said."""

    units: list[str]
    result: Result
    metric: float | None
    seconds: float
    why: str | None = None  # why a skip was a skip (or the import error judged bad)
    logged: bool = False  # the answer of an earlier run (--resume), not built again
    # What the units held when it ran (Session.contents): a resumed answer is reused only
    # for the same packages under the same unit ids (another envguard may group them
    # otherwise, another bad snapshot holds other versions).
    contents: str | None = None


@dataclass
class BisectReport:
    """What bisect found; ``verdict`` is the sentence a person reads first."""

    good: str
    bad: str
    verdict: str
    culprits: list[dict[str, object]] = field(default_factory=list)
    units: list[dict[str, object]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    other_drift: list[str] = field(default_factory=list)  # every drifted item, every section
    complete: bool = True
    # culprits: the environment's changes named (today's code runs good in the good
    # environment); both: those and a commit (--repo); not_the_environment: shown innocent
    # (nothing drifted, the rebuilt bad environment runs good, or, with --repo, it runs good
    # at the snapshot's commit); outside_the_environment: the good environment runs bad
    # with today's code and, without --repo, the environment could not be tested on its
    # own; undecided: a run that decides could not be judged.
    outcome: Literal[
        "culprits", "both", "not_the_environment", "outside_the_environment", "undecided"
    ] = "undecided"
    commit: FirstBadCommit | None = None  # with --repo: the first bad commit
    installs: int = 0  # times the scratch venv was built (runs in one environment share it)
    log: str | None = None
    scratch: str | None = None  # the scratch venv, when --keep kept it
    schema: Literal["envguard.bisect"] = "envguard.bisect"
    schema_version: Literal[1] = 1

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @property
    def exit_code(self) -> int:
        """0 when bisect answered (and finished within its budget), else 1."""
        return 0 if self.complete and self.outcome != "undecided" else 1
