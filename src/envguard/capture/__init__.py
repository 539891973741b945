"""Turn probe output plus git, files and caches into a Snapshot.

request.py checks what to capture and starts the probe (no pydantic import, so the probe
runs while the models load); snapshot.py assembles the Snapshot; hosts.py captures through
command prefixes and many hosts at once.
"""
