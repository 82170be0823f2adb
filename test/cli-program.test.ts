import { afterEach, describe, expect, it } from 'vitest';
import { UsageFailure, buildProgram } from '../src/cli/program.js';

describe('boxrelay program (in process)', () => {
  const saved = process.env.BOXRELAY_SECRETS;
  afterEach(() => {
    if (saved === undefined) delete process.env.BOXRELAY_SECRETS;
    else process.env.BOXRELAY_SECRETS = saved;
  });

  it('is built without running, and ends a usage problem with a UsageFailure carrying a stable code', async () => {
    delete process.env.BOXRELAY_SECRETS;
    const run = buildProgram().exitOverride().parseAsync(['send-test'], { from: 'user' });
    const failure = await run.then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(failure).toBeInstanceOf(UsageFailure);
    expect(failure).toMatchObject({ code: 'invalid_usage', message: 'send-test needs --secret (or BOXRELAY_SECRETS)' });
  });
});
