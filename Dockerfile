# boxrelay container image.
#   docker build -t boxrelay .
#   docker run --rm -p 8080:8080 -p 9091:9091 -v boxrelay-data:/data \
#     -e BOXRELAY_SECRETS=whsec_... boxrelay
# Both stages use the same Debian release, so the natively compiled better-sqlite3 addon
# built in the first stage links against the libc/libstdc++ of the second.

ARG NODE_IMAGE=node:24-bookworm-slim

# ---------------------------------------------------------------------------------------------
# Build: install all dependencies (compiling better-sqlite3), compile TypeScript to dist/,
# then drop the dev dependencies so node_modules can be copied as is.
FROM ${NODE_IMAGE} AS build

RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app

# Build native addons from source rather than downloading prebuilt binaries, against the
# headers the official Node image ships in /usr/local/include/node (no header download).
ENV npm_config_build_from_source=true \
    npm_config_nodedir=/usr/local

# Dependencies first, so this layer is reused while only the sources change.
COPY package.json package-lock.json .npmrc ./
RUN npm ci

COPY . .
RUN npm run build \
 && npm prune --omit=dev

# ---------------------------------------------------------------------------------------------
# Runtime: no compiler, no dev dependencies, no root.
FROM ${NODE_IMAGE} AS runtime

ENV NODE_ENV=production \
    BOXRELAY_DATABASE=/data/boxrelay.db

RUN groupadd --system --gid 10001 boxrelay \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
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

ENTRYPOINT ["node", "bin/boxrelay.js"]
CMD ["serve"]
