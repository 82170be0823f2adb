import request from 'supertest';
import { afterEach, beforeEach, expect } from 'vitest';
import { checkAdminAnswer } from './admin-openapi.js';
import { testRelay, type TestRelay } from './relay.js';
import { SECRET } from './sign.js';

export const ADMIN_TOKEN = 'adm_7f3c2a9e51b04d6f8e2a1c0b9d8e7f6a';
export const HOOK_SECRET = 'whsec_aG9vay1zZWNyZXQtMDEyMzQ1Njc4OWFiY2RlZg==';

/** Relay overrides that turn the admin API on, with a signing hook whose secret must never show. */
export const adminConfig = {
  adminToken: ADMIN_TOKEN,
  hooks: [{ name: 'alerts', url: 'http://127.0.0.1:9/hook', secret: HOOK_SECRET, headers: { authorization: 'Bearer hook-auth' } }],
};

/** Authenticated calls to the internal app; every answer is kept so a test can check none leaks a secret. */
export function adminClient(t: TestRelay) {
  const bodies: string[] = [];
  const call = async (method: 'get' | 'delete' | 'post', path: string, token = ADMIN_TOKEN) => {
    const response = await request(t.relay.internalApp)[method](path).set('Authorization', `Bearer ${token}`);
    bodies.push(`${JSON.stringify(response.headers)}\n${response.text}`);
    return response;
  };
  return {
    get: (path: string) => call('get', path),
    delete: (path: string) => call('delete', path),
    call,
    bodies,
    expectNoSecrets() {
      const all = bodies.join('\n');
      expect(bodies.length).toBeGreaterThan(0);
      for (const secret of [SECRET, ADMIN_TOKEN, HOOK_SECRET, 'hook-auth']) expect(all).not.toContain(secret);
    },
  };
}

export type AdminClient = ReturnType<typeof adminClient>;

/**
 * An admin request to a relay process on its internal port (`path` under `/admin`), with the token;
 * its answer is checked against the OpenAPI document as an in-process relay's are.
 */
export async function fetchAdmin(internalPort: number, method: string, path: string, token = ADMIN_TOKEN): Promise<{ status: number; body: unknown }> {
  const url = `/admin${path}`;
  const response = await fetch(`http://127.0.0.1:${internalPort}${url}`, { method, headers: { Authorization: `Bearer ${token}` } });
  const text = await response.text();
  checkAdminAnswer({ method, url, status: response.status, headers: Object.fromEntries(response.headers), body: text });
  return { status: response.status, body: text === '' ? undefined : (JSON.parse(text) as unknown) };
}

/**
 * A fresh relay with the admin API on for each test of the calling suite; after each test, checks
 * that no admin answer carried a secret.
 */
export function adminRelayPerTest(databaseUrl: () => Promise<string>): { t: TestRelay; admin: AdminClient } {
  const current = {} as { t: TestRelay; admin: AdminClient };
  beforeEach(async () => {
    current.t = await testRelay({ database: await databaseUrl(), ...adminConfig });
    current.admin = adminClient(current.t);
  });
  afterEach(async () => {
    current.admin.expectNoSecrets();
    await current.t.close();
  });
  return current;
}
