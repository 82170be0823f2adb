import { describe, expect, it } from 'vitest';
import { describeError, errorCodeOf, InvalidEventError, RelayError, StorageUnavailableError } from '../src/errors.js';
import { isHttpRefusal, statusByCode } from '../src/http/status.js';
import { asRelayError } from '../src/http/send-error.js';
import { UpstreamUnreachableError } from '../src/upstream/errors.js';
import { DatabaseBusyError } from '../src/store/engines/database.js';
import { LeaseLostError } from '../src/reconcile/errors.js';
import { ConfigError } from '../src/config/load.js';
import { BusDownError, HookRequestInvalidError, asSinkFailure } from '../src/sinks/failures.js';
import { FilterError } from '../src/sinks/filter.js';

const systemError = (message: string, code: string) => Object.assign(new Error(message), { code });

describe('one error base', () => {
  it('every family derives from RelayError, with its stable code and its cause', () => {
    const cause = systemError('connect ECONNREFUSED 127.0.0.1:9', 'ECONNREFUSED');
    const upstream = new UpstreamUnreachableError('GET /boxes', 'connection failed: ECONNREFUSED', { cause });
    expect(upstream).toBeInstanceOf(RelayError);
    expect(upstream).toMatchObject({ code: 'upstream_unreachable', name: 'UpstreamUnreachableError', cause });
    expect(new LeaseLostError()).toMatchObject({ code: 'reconcile_lease_lost' });
    expect(new DatabaseBusyError(3)).toMatchObject({ code: 'database_busy', name: 'DatabaseBusyError' });
    expect(new ConfigError(['x: bad'])).toMatchObject({ code: 'invalid_config', name: 'ConfigError' });
    expect(new BusDownError('amqp')).toBeInstanceOf(RelayError);
    expect(new BusDownError('amqp')).toMatchObject({ code: 'amqp_down', name: 'BusDownError', retryable: true });
    expect(new FilterError('no bool')).toMatchObject({ code: 'filter_error', name: 'FilterError' });
  });

  it('a sink failure is never an HTTP answer, even with a code spelled like one', () => {
    const hook = new HookRequestInvalidError();
    expect(hook.code).toBe('invalid_request');
    expect(isHttpRefusal(hook)).toBe(false);
    expect(asRelayError(hook)).toMatchObject({ code: 'internal_error', cause: hook });
  });

  it('a library error met by a sink is retried, told by the one describer', () => {
    const failure = asSinkFailure(new TypeError('fetch failed', { cause: systemError('x'.repeat(500), 'ECONNRESET') }));
    expect(failure).toMatchObject({ code: 'sink_error', retryable: true });
    expect(failure.message).toBe(`fetch failed: ${'x'.repeat(200)}…(500 chars)`);
  });

  it('only codes with an HTTP meaning have a status; our other errors answer 500 internal_error', () => {
    expect(isHttpRefusal(new InvalidEventError('bad'))).toBe(true);
    const busy = new DatabaseBusyError(100);
    expect(isHttpRefusal(busy)).toBe(false);
    expect(Object.hasOwn(statusByCode, busy.code)).toBe(false);
    expect(asRelayError(busy)).toMatchObject({ code: 'internal_error', cause: busy });
    // An upstream 404 keeps its own meaning: it is not taken for a malformed request.
    const upstream = Object.assign(new UpstreamUnreachableError('GET /boxes', 'no answer'), { status: 404 });
    expect(asRelayError(upstream).code).toBe('internal_error');
  });
});

describe('describeError', () => {
  it('tells one of ours by its message alone: it says what matters of its cause', () => {
    const error = new UpstreamUnreachableError('GET /boxes', 'connection failed: ECONNREFUSED at 127.0.0.1:9', {
      cause: new TypeError('fetch failed', { cause: systemError('connect ECONNREFUSED 127.0.0.1:9', 'ECONNREFUSED') }),
    });
    expect(describeError(error)).toBe('Sandbox Service unreachable for GET /boxes: connection failed: ECONNREFUSED at 127.0.0.1:9');
  });

  it('tells a foreign error by its message (and code if asked), then its causes, each said once', () => {
    expect(describeError(systemError('database is locked', 'SQLITE_BUSY'))).toBe('database is locked');
    expect(describeError(systemError('database is locked', 'SQLITE_BUSY'), { codes: true })).toBe('SQLITE_BUSY: database is locked');
    expect(describeError(new DatabaseBusyError(1), { codes: true })).toBe('database_busy: 1 queries already wait for a database connection');
    const fetchFailed = new TypeError('fetch failed', { cause: systemError('connect ECONNREFUSED 127.0.0.1:9', 'ECONNREFUSED') });
    expect(describeError(fetchFailed)).toBe('fetch failed: connect ECONNREFUSED 127.0.0.1:9');
    // Several addresses tried: an empty AggregateError leads to its first error.
    const aggregate = Object.assign(new AggregateError([systemError('connect ECONNREFUSED ::1:5432', 'ECONNREFUSED')], ''), { code: 'ECONNREFUSED' });
    expect(describeError(aggregate)).toBe('connect ECONNREFUSED ::1:5432');
    expect(describeError(aggregate, { codes: true })).toBe('connect ECONNREFUSED ::1:5432');
    expect(describeError(new Error('outer', { cause: new StorageUnavailableError() }))).toBe('outer: storage cannot commit; retry later');
    expect(describeError('plain text')).toBe('plain text');
    expect(describeError(undefined)).toBe('unknown error');
  });

  it('cuts foreign text short, ends on a cyclic chain, and takes a secret out before cutting', () => {
    expect(describeError(new Error('x'.repeat(5000)))).toBe(`${'x'.repeat(200)}…(5000 chars)`);
    const a = new Error('a');
    const b = new Error('b', { cause: a });
    (a as { cause?: unknown }).cause = b;
    expect(describeError(a)).toBe('a: b');
    const secret = `whsec_${'s'.repeat(300)}`;
    const quoting = new Error(`${'q'.repeat(150)} value (${secret}) refused`);
    const text = describeError(quoting, { secret });
    expect(text).not.toContain('sssss');
    expect(text).toContain('[redacted]');
  });

  it('finds the code along the chain', () => {
    expect(errorCodeOf(new TypeError('fetch failed', { cause: systemError('x', 'ENOTFOUND') }))).toBe('ENOTFOUND');
    expect(errorCodeOf(new Error('none'))).toBeUndefined();
  });
});
