#!/bin/sh
# Builds git revision $1 of this repository into directory $2 (node_modules linked from here), for
# BENCH_COMPARE=$2: `sh bench/build-rev.sh HEAD~1 /tmp/boxrelay-prev`.
set -eu
rev=$1 dir=$2
root=$(git rev-parse --show-toplevel)
rm -rf "$dir" && mkdir -p "$dir"
git -C "$root" archive "$rev" | tar -x -C "$dir"
ln -s "$(readlink -f "$root/node_modules")" "$dir/node_modules"
(cd "$dir" && npx tsc -p tsconfig.json)
echo "built $(git -C "$root" rev-parse --short "$rev") into $dir"
