"""Turn probe output plus git, files and caches into a Snapshot."""

from envguard.capture.snapshot import (
    CaptureRequest,
    capture_snapshot,
    parse_metric,
    request_like,
)

__all__ = ["CaptureRequest", "capture_snapshot", "parse_metric", "request_like"]
