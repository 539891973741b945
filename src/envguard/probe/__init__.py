"""The stdlib-only probe sent to the target interpreter, and the code that runs it."""

from envguard.probe.runner import resolve_python, run_probe

__all__ = ["resolve_python", "run_probe"]
