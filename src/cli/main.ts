import { describeError } from '../errors.js';
import { exitCodeOf } from './exit-code.js';
import { buildProgram } from './program.js';

// The `boxrelay` executable (bin/boxrelay.js imports this module): running is the whole point of
// importing it, so the program itself lives in program.ts, which tests import without side effects.
buildProgram()
  .parseAsync(process.argv)
  .catch((error: unknown) => {
    process.stderr.write(`boxrelay: ${describeError(error)}\n`);
    process.exit(exitCodeOf(error));
  });
