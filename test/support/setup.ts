import { afterAll } from 'vitest';
import { dropCreatedSchemas } from './databases.js';

// Every test file's PostgreSQL schemas go once the file is done (see dropCreatedSchemas).
afterAll(dropCreatedSchemas);
