import { methodNotAllowed } from '../send-error.js';
import { z } from 'zod';
import { okAnswer, reply, type AdminOperation } from './operation.js';
import type { AdminRoutes } from './router.js';

export const versionOperation = {
  method: 'get',
  path: '/version',
  summary: "This relay's version, the newest migration applied, and the Node.js running it.",
  answers: {
    200: okAnswer({
      version: z.string(),
      schema: z.string().nullable().describe('The newest migration applied in the database.'),
      node: z.string().describe('`process.version`.'),
    }),
  },
  errors: [],
} as const satisfies AdminOperation;

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
    operations: [versionOperation],
    mount(router) {
      router.get(versionOperation.path, async (_req, res) => {
        reply(res, versionOperation, 200, { ok: true, version, schema: await schema(), node });
      });
      router.all('/version', methodNotAllowed('GET'));
    },
  };
}
