"""Comparison: the change engine, its sections, the policy, lockfiles and fleets."""

from envguard.snapshots.clean import comparison_code as _stamp

_stamp()  # the comparison's files, stamped before any of them loads (snapshots/clean.py)
