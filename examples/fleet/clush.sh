#!/usr/bin/env bash
# ClusterShell as the engine, nothing installed on the nodes: clush sends the probe to every
# node on stdin and prefixes each node's line with its name; its own "exited with exit
# code N" lines name the nodes that failed. Every node in NODES is expected to answer.
# CLUSH_OPTS: more clush options (e.g. '-f 256' for a wider fan-out). ENVGUARD_NODE_TIMEOUT:
# seconds a node may take (default 120; clush -u), then it is a row "exited with exit code"
# or sends nothing; ssh's connection is bounded by clush -t (30 s).
# Usage: examples/fleet/clush.sh 'gpu[001-128]' [PYTHON]
# Tested with ClusterShell 1.9 (-R exec stand-in nodes, tests/compare/test_fanout.py).
set -uo pipefail
nodes="$1"; python="${2:-python3}"; out="snapshots/clush-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$out"
envguard probe-payload > "$out/p.py"
clush -t 30 -u "${ENVGUARD_NODE_TIMEOUT:-120}" ${CLUSH_OPTS:-} -w "$nodes" "$python -I -S -" \
  < "$out/p.py" > "$out/nodes.txt" 2>&1
envguard fleet "$out/nodes.txt" --hosts "$(nodeset -e -S, "$nodes")"
