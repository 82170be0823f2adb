import { afterAll, afterEach, expect } from 'vitest';
import { takeAdminMismatches } from './admin-openapi.js';
import { dropCreatedSchemas } from './databases.js';

// An admin answer that the OpenAPI document does not allow fails the test that got it.
afterEach(() => {
  expect(takeAdminMismatches(), 'admin answers that GET /admin/openapi.json does not describe').toEqual([]);
});

// Every test file's PostgreSQL schemas go once the file is done (see dropCreatedSchemas).
afterAll(dropCreatedSchemas);
