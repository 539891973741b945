#!/usr/bin/env bash
# pdsh/clush runs one capture per node over its own fan-out; fleet compares the results.
# Usage: examples/fleet/pdsh.sh 'gpu[01-64]' /shared/project
set -euo pipefail
nodes="$1"; project="$2"; out="snapshots/pdsh-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$project/$out"
pdsh -w "$nodes" "cd '$project' && envguard snapshot --force --out '$out/{host}.json'"
# clush equivalent: clush -w "$nodes" "cd '$project' && envguard snapshot --out '$out/{host}.json'"
cd "$project" && envguard fleet "$out"
