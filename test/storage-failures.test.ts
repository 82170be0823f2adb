import { describe, expect, it } from 'vitest';
import { StorageUnavailableError } from '../src/errors.js';
import { createStorageFailureLog, storageFailureReason } from '../src/store/engines/storage-failures.js';
import { ManualClock } from './support/clock.js';
import { captureLogs } from './support/log-capture.js';

function refused(message: string, code?: string): StorageUnavailableError {
  return new StorageUnavailableError({ cause: Object.assign(new Error(message), code ? { code } : {}) });
}

describe('storage failure log', () => {
  it('logs the cause once per distinct reason per interval, counting what it left out', () => {
    const clock = new ManualClock();
    const logs = captureLogs();
    const report = createStorageFailureLog({ logger: logs.logger, clock, intervalMs: 10_000 });

    report(refused('connect ECONNREFUSED 127.0.0.1:5432', 'ECONNREFUSED'));
    report(refused('connect ECONNREFUSED 127.0.0.1:5432', 'ECONNREFUSED'));
    report(refused('terminating connection due to administrator command', '57P01'));
    clock.advance(9_999);
    report(refused('connect ECONNREFUSED 127.0.0.1:5432', 'ECONNREFUSED'));
    clock.advance(1);
    report(refused('connect ECONNREFUSED 127.0.0.1:5432', 'ECONNREFUSED'));

    expect(logs.entries().map(({ msg, reason, suppressed, level }) => ({ msg, reason, suppressed, level }))).toEqual([
      { msg: 'storage failure', reason: 'connect ECONNREFUSED 127.0.0.1:5432', suppressed: 0, level: 50 },
      { msg: 'storage failure', reason: '57P01: terminating connection due to administrator command', suppressed: 0, level: 50 },
      { msg: 'storage failure', reason: 'connect ECONNREFUSED 127.0.0.1:5432', suppressed: 2, level: 50 },
    ]);
  });

  it('cuts a long reason short', () => {
    expect(storageFailureReason(refused('x'.repeat(10_000)))).toBe(`${'x'.repeat(200)}…(10000 chars)`);
  });
});
