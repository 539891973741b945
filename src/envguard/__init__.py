"""envguard: snapshot, diff and rebuild ML training environments."""

__version__ = "0.1.0"
