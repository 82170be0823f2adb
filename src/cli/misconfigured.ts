/** A configuration problem found by a command: one line naming the setting, exit code 2 like invalid configuration. */
export function exitMisconfigured(message: string): never {
  process.stderr.write(`boxrelay: ${message}\n`);
  process.exit(2);
}

/** Invalid configuration, as every command ends on it: each problem on a line of its own, exit code 2. */
export function exitInvalidConfig(problems: string[]): never {
  for (const problem of problems) process.stderr.write(`boxrelay: invalid configuration: ${problem}\n`);
  process.exit(2);
}
