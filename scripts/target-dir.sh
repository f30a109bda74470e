#!/bin/sh
# Prints cargo's target directory for this checkout, as cargo itself resolves it
# (CARGO_TARGET_DIR, build.target-dir in a cargo config, else ./target), so the Makefile, the
# demo and the VM suite find what cargo built wherever that is.
#
# usage: scripts/target-dir.sh        env: CARGO (default cargo)
set -eu
cd "$(dirname "$0")/.."
dir=$(${CARGO:-cargo} metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
if [ -z "$dir" ]; then
    echo "target-dir: 'cargo metadata' did not name a target_directory" >&2
    exit 1
fi
echo "$dir"
