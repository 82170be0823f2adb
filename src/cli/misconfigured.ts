/** A configuration problem found by a command: one line naming the setting, exit code 2 like invalid configuration. */
export function exitMisconfigured(message: string): never {
  process.stderr.write(`boxrelay: ${message}\n`);
  process.exit(2);
}
