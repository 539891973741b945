"""envguard's version and its snapshot file format: a leaf any layer may import. The
package re-exports both, but a name taken from ``envguard`` is the API's to every layer."""

__version__ = "0.1.0"
# The snapshot file format (bumped on an incompatible change; older envguards refuse newer).
SCHEMA_VERSION = 1
