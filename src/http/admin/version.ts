import { methodNotAllowed } from '../send-error.js';
import type { AdminRoutes } from './router.js';

export interface VersionDeps {
  /** This relay's version (package.json). */
  version: string;
  /** The Node.js running it (`process.version`). */
  node: string;
  /** The newest migration applied in the database, read per request: a newer replica may have migrated it since. */
  schema(): Promise<string | null>;
}

/** `GET /admin/version` (contract section 22): `{"ok":true,"version","schema","node"}`. */
export function versionRoutes({ version, node, schema }: VersionDeps): AdminRoutes {
  return {
    mount(router) {
      router.get('/version', async (_req, res) => {
        res.json({ ok: true, version, schema: await schema(), node });
      });
      router.all('/version', methodNotAllowed('GET'));
    },
  };
}
