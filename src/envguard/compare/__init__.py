"""Comparison: the change engine, its sections, the policy, lockfiles and fleets."""
