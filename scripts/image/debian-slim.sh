#!/usr/bin/env bash
# Makes a root file system tarball like the official debian:<suite>-slim, the way Debian's official
# images are made: debuerreotype (debootstrap --variant=minbase, the same minimizing config, the
# same slimming), from the given Debian mirror instead of snapshot.debian.org.
#   debian-slim.sh <suite> <mirror> <security mirror> <out.tar>
set -euo pipefail

suite=$1 mirror=$2 security=$3 out=$4
export TZ=UTC LC_ALL=C

work=$(mktemp -d "${TMPDIR:-/tmp}/debian-slim.XXXXXX")
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs

debuerreotype-init --non-debian "$rootfs" "$suite" "$mirror"
debuerreotype-minimizing-config "$rootfs"
# The official images' sources (debuerreotype-debian-sources-list asks snapshot.debian.org, which
# cannot be reached here), pointing at the given mirrors.
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
cat > "$rootfs/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: $keyring

Types: deb
URIs: $security
Suites: $suite-security
Components: main
Signed-By: $keyring
SOURCES
rm -f "$rootfs/etc/apt/sources.list"
debuerreotype-apt-get "$rootfs" update -qq
debuerreotype-apt-get "$rootfs" full-upgrade -yqq
debuerreotype-slimify "$rootfs"
# As the official images: no machine-id (never booted), no apt lists or caches (debuerreotype-tar).
debuerreotype-tar --exclude ./etc/machine-id "$rootfs" "$out.partial"
mv "$out.partial" "$out"
