"""Finish a capture: the probe's validated report becomes a snapshot document
(snapshots.document), then a Snapshot model, or, for `envguard snapshot`, a document
written as it is once it is shown to fit the model (no pydantic import)."""

from __future__ import annotations

from envguard.errors import ProbeError, field_path
from envguard.snapshots import document
from envguard.snapshots.request import CaptureRequest, StartedCapture, start_capture

TYPE_CHECKING = False  # typing is not loaded for a command's start

if TYPE_CHECKING:
    from collections.abc import Callable

    from envguard.probe.report_shape import ProbeReport
    from envguard.snapshots.models import Snapshot


def capture_snapshot(request: CaptureRequest) -> Snapshot:
    """Measure everything ``request`` names and return it as a Snapshot."""
    return finish_capture(start_capture(request))


def finish_capture(
    started: StartedCapture, *, meanwhile: Callable[[], object] | None = None
) -> Snapshot:
    """Wait for a started capture's probe and return its Snapshot. ``meanwhile`` runs first,
    beside the probe: the caller loads there what it needs once the answer is in."""
    return live_model(finish_raw(started, meanwhile=meanwhile), started)


def finish_raw(
    started: StartedCapture, *, meanwhile: Callable[[], object] | None = None
) -> document.Document:
    """finish_capture()'s document before its model: as measured, what only a live side
    carries (a file it could not read) kept; live_model() makes the model."""
    if meanwhile is not None:
        meanwhile()
    return document.from_report(started.probe.result(), started.request)


def finish_document(
    started: StartedCapture, *, meanwhile: Callable[[], object] | None = None
) -> document.Document:
    """Wait for a started capture's probe and return its snapshot document as the file
    holds it; the model (pydantic) checks it only where document.fits() cannot vouch.
    ``meanwhile``: as finish_capture's."""
    if meanwhile is not None:
        meanwhile()

    def made(report: ProbeReport) -> tuple[document.Document, bool]:
        doc = document.from_report(report, started.request)
        return doc, document.fits(doc)

    # made while the probe's process ends (its report written): see ProbeRun.result_then
    doc, fits = started.probe.result_then(made)
    if fits:
        return document.stored(doc)
    return live_model(doc, started).model_dump(mode="json")


def snapshot_from_report(report: ProbeReport, request: CaptureRequest) -> Snapshot:
    """The Snapshot of a report (its model, validated: pydantic's ValidationError if not)."""
    from envguard.snapshots.models import Snapshot

    return Snapshot.model_validate(document.from_report(report, request))


def live_model(doc: document.Document, started: StartedCapture) -> Snapshot:
    """The model of a live side's document (ProbeError when the report does not fit one)."""
    from pydantic import ValidationError

    try:
        return document.typed(doc)
    except ValidationError as exc:  # a report that validated but does not fit a snapshot
        first = exc.errors()[0]
        where = field_path(first["loc"])
        raise ProbeError(
            f"{started.probe.label}: the probe's report does not fit a snapshot at {where}:"
            f" {first['msg']}"
        ) from None
