"""The stdlib-only probe sent to the target interpreter, and the code that runs it."""

from envguard.probe.runner import recorded_python, resolve_python, run_probe

__all__ = ["recorded_python", "resolve_python", "run_probe"]
