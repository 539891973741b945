#!/usr/bin/env bash
# ClusterShell as the engine, nothing installed on the nodes: clush sends the probe to every
# node on stdin and prefixes each node's line with its name; its own "exited with exit
# code N" lines name the nodes that failed. Every node in NODES is expected to answer.
# CLUSH_OPTS: more clush options (e.g. '-f 256' for a wider fan-out).
# Usage: examples/fleet/clush.sh 'gpu[001-128]' [PYTHON]
# Tested with ClusterShell 1.9 (-R exec stand-in nodes, tests/compare/test_fanout.py).
set -uo pipefail
nodes="$1"; python="${2:-python3}"; out="snapshots/clush-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$out"
envguard probe-payload > "$out/p.py"
clush ${CLUSH_OPTS:-} -w "$nodes" "$python -I -S -" < "$out/p.py" > "$out/nodes.txt" 2>&1
envguard fleet "$out/nodes.txt" --hosts "$(nodeset -e -S, "$nodes")"
