"""The code that runs inside the *target* interpreter: standard library only, Python 3.8+.

These modules are never imported by envguard itself. probe/payload.py sends their source
(with envguard/redact.py) on stdin as one program; there they become the package
``envguard_probe`` and ``main.main`` prints one JSON report (or one JSON error object).
"""
