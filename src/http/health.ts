import type { Express } from 'express';
import type { ReadinessReport } from './readiness.js';
import { methodNotAllowed } from './send-error.js';

/** `/healthz` and `/readyz`; only the internal listener names the dependencies. */
export function mountHealth(app: Express, readiness: () => Promise<ReadinessReport>, detailed: boolean): void {
  app.get('/healthz', (_req, res) => void res.json({ ok: true }));
  app.get('/readyz', async (_req, res) => {
    const report = await readiness();
    res.status(report.ok ? 200 : 503).json(detailed ? report : { ok: report.ok });
  });
  app.all(['/healthz', '/readyz'], methodNotAllowed('GET'));
}
