import { readFileSync } from 'node:fs';

/**
 * `node dist/bench/profile-summary.js <file.cpuprofile> [rows]`: where a `--cpu-prof` profile spent
 * its time, by area (package, source file, node internals, GC, idle), by function (self) and by
 * function including callees, so a change can be aimed at what costs.
 */
interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const [file, rowsArg] = process.argv.slice(2);
if (!file) throw new Error('usage: profile-summary <file.cpuprofile> [rows]');
const rows = Number(rowsArg ?? 25);
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);

function area({ url, functionName }: ProfileNode['callFrame']): string {
  if (!url) return functionName.startsWith('(') ? functionName : '(native)';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1] as string;
  const own = /\/dist\/(.+)$/.exec(url);
  if (own) return own[1] as string;
  return url.startsWith('node:') ? url.replace(/^node:internal\//, 'node:') : url;
}
const label = (n: ProfileNode): string => `${n.callFrame.functionName || '(anonymous)'} ${area(n.callFrame)}:${n.callFrame.lineNumber + 1}`;

const self = new Map<string, number>();
const byArea = new Map<string, number>();
const inclusive = new Map<string, number>();
let total = 0;
profile.samples.forEach((id, i) => {
  const dt = profile.timeDeltas[i] ?? 0;
  total += dt;
  const node = byId.get(id) as ProfileNode;
  self.set(label(node), (self.get(label(node)) ?? 0) + dt);
  byArea.set(area(node.callFrame), (byArea.get(area(node.callFrame)) ?? 0) + dt);
  const seen = new Set<string>();
  for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
    const key = label(byId.get(cur) as ProfileNode);
    if (!seen.has(key)) inclusive.set(key, (inclusive.get(key) ?? 0) + dt);
    seen.add(key);
  }
});

const print = (title: string, map: Map<string, number>, filter: (key: string) => boolean = () => true) => {
  console.log(`\n## ${title}`);
  for (const [key, us] of [...map].filter(([k]) => filter(k)).sort((a, b) => b[1] - a[1]).slice(0, rows)) {
    console.log(`${((us / total) * 100).toFixed(1).padStart(5)}%  ${(us / 1000).toFixed(0).padStart(7)} ms  ${key}`);
  }
};
console.log(`total ${(total / 1e6).toFixed(1)} s`);
print('self time by area', byArea);
print('self time by function', self);
print('inclusive time, own code and chosen libraries', inclusive, (k) => / (src|bench)\/|pino|zod|express|better-sqlite3|raw-body|router/.test(k));
