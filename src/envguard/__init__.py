"""envguard: snapshot, diff and rebuild ML training environments."""

__version__ = "0.1.0"
# The snapshot file format (bumped on an incompatible change; older envguards refuse newer).
SCHEMA_VERSION = 1
