"""A clean diff told again without the engine: a clean `envguard diff` (the common case)
ends without the models, the engine or its sections (pydantic and packaging: about 70 ms
of a 2-core machine's imports, beside the probe).

The engine is a function of the two documents it is given, the policy and its own code:
it reads no file and no clock, and of a snapshot's top-level fields it takes UNREAD ones
only as labels (names) and the good run's metrics, which Clean carries. So its answer for
two documents can be kept, and the same two (in every field it reads, the live side's own
included: a file it could not read) under the same policy and code get the same answer.
Only clean answers are kept (a drift is shown from its changes); equal documents alone
are not a clean diff (a library whose embedded version disagrees with its metadata, a
path listed twice, a file the snapshot could not read are said at every diff).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import astuple
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envguard.compare.models import Drift
    from envguard.compare.policy import Policy

# The top-level fields no section reads (how and when a snapshot was taken, not what it
# measured): the engine takes only the names (Drift's labels) and the good run's metrics
# from them, as Clean does. tests/compare/test_identical.py holds the sections to it.
UNREAD = frozenset({"name", "created", "signature", "command", "note", "metrics"})


def _compared(doc: dict[str, Any]) -> bytes:
    """What the engine reads of ``doc``, as canonical JSON (1, 1.0 and true differ)."""
    kept = {k: v for k, v in doc.items() if k not in UNREAD}
    return json.dumps(kept, sort_keys=True, separators=(",", ":")).encode("utf-8", "surrogatepass")


def snapshot_key(expected: dict[str, Any], policy: Policy, code: str) -> str:
    """What the engine's answer depends on besides the live side: the snapshot's document
    as compared, the policy (where it was read from aside), the comparison's code (``code``:
    its files' stamp)."""
    rules = astuple(policy)[:-1]  # Policy.source last: where it was read is no rule
    digest = hashlib.sha256(code.encode("utf-8", "surrogatepass") + b"\0")
    digest.update(repr(rules).encode("utf-8", "surrogatepass") + b"\0")
    digest.update(_compared(expected))
    return digest.hexdigest()[:32]


def live_key(live: dict[str, Any]) -> str:
    """The live side's document as the engine reads it (what only a live side carries
    kept), as a key."""
    return hashlib.sha256(_compared(live)).hexdigest()[:32]


class Clean:
    """A diff that found nothing, for the command line to say without loading the models:
    the fields a report of a clean drift reads (the summary, the metrics footer, the JSON
    document, GitHub's annotations and step outputs, the Markdown report), as a Drift has
    them; ``drift()`` is that Drift (what engine.diff returns for the same two sides)."""

    changes: tuple[()] = ()
    notes: tuple[str, ...] = ()
    verdict: tuple[str, ...] = ()
    groups: tuple[()] = ()
    subject: str | None = None
    max_severity: None = None

    def __init__(
        self, expected_name: str | None, actual_name: str | None, metrics: dict[str, Any]
    ) -> None:
        self.expected_name, self.actual_name, self.metrics = expected_name, actual_name, metrics

    def drift(self) -> Drift:
        from envguard.compare.engine import clean_drift

        return clean_drift(self.expected_name, self.actual_name, self.metrics)
