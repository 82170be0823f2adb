#!/usr/bin/env node
// The compiled CLI; `npm run build` (or `npm start`) produces dist/. Run directly by a machine's older
// Node (the shebang finds the first `node` on PATH), it says which to use rather than failing later.
const major = Number(process.versions.node.split('.')[0]);
if (major < 24) {
  console.error(
    `boxrelay runs on Node 24 or newer, not ${process.version}: use \`npx boxrelay\` or \`npm start\`, which run the Node that \`npm ci\` put in node_modules/.bin`,
  );
  process.exit(1);
}
await import('../dist/src/cli/main.js');
