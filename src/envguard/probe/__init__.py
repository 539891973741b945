"""Measure an interpreter: the target-side probe (target/), the payload that carries it,
the runner that starts it, and the typed report it returns."""
