"""Snapshots: the models (the file format), the store on disk, and capture.

request.py checks what to capture and starts the probe (no pydantic import, so the probe
runs while the models load); capture.py assembles the Snapshot from the probe's report;
live.py measures the live side of a diff as a snapshot was measured; hosts.py captures
through command prefixes and many hosts at once; repos.py and sources.py read git and
PEP 610 records.
"""

from envguard.snapshots.clean import comparison_code as _stamp

_stamp()  # the comparison's files, stamped before any of them loads (snapshots/clean.py)
