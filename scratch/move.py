"""Moves files and rewrites every relative import that points at them (or from them)."""
import os, re, subprocess, sys
ROOT = '/work/main'
S = 'src/store/'
MOVES = {
  # the log and its cursors: already in log/
  # the exceptions (outbox rows)
  'outbox.ts': 'exceptions/outbox.ts', 'outbox-rows.ts': 'exceptions/rows.ts', 'outbox-work.ts': 'exceptions/claims.ts', 'dead-letters.ts': 'exceptions/dead-letters.ts',
  'replay.ts': 'exceptions/replay.ts', 'event-rows.ts': 'exceptions/event-rows.ts',
  # the engines
  'database.ts': 'engines/database.ts', 'database-clock.ts': 'engines/database-clock.ts', 'atomically.ts': 'engines/atomically.ts',
  'unsynced.ts': 'engines/unsynced.ts', 'statement-cache.ts': 'engines/statement-cache.ts', 'checkpointer.ts': 'engines/checkpointer.ts',
  'writer-lock.ts': 'engines/writer-lock.ts', 'migrate.ts': 'engines/migrate.ts', 'storage-failures.ts': 'engines/storage-failures.ts',
  # the write path
  'delivery-sql.ts': 'write/delivery-sql.ts', 'sqlite-delivery-writer.ts': 'write/sqlite-delivery-writer.ts',
  'postgres-delivery-writer.ts': 'write/postgres-delivery-writer.ts', 'accept-event.ts': 'write/accept-event.ts',
  # state kept beside the log
  'boxes.ts': 'state/boxes.ts', 'events.ts': 'state/events.ts', 'sink-state.ts': 'state/sink-state.ts', 'secrets-store.ts': 'state/secrets-store.ts',
  'reconcile-runs.ts': 'state/reconcile-runs.ts', 'leases.ts': 'state/leases.ts', 'audit.ts': 'state/audit.ts', 'stats.ts': 'state/stats.ts',
  # retention, keeping and moving
  'prune.ts': 'retention/prune.ts', 'prune-schedule.ts': 'retention/prune-schedule.ts', 'backup.ts': 'copy/backup.ts',
}
moves = {os.path.join(ROOT, S, a): os.path.join(ROOT, S, b) for a, b in MOVES.items()}
files = subprocess.run(['git', 'ls-files', '*.ts', '*.mjs', '*.js'], cwd=ROOT, capture_output=True, text=True).stdout.split()
files = [os.path.join(ROOT, f) for f in files if not f.startswith('node_modules')] + [os.path.join(ROOT, f) for f in sys.argv[1:]]
files = sorted(set(files))
SPEC = re.compile(r"""((?:from|import)\s*\(?\s*['"])(\.{1,2}/[^'"]+)(['"])""")
def resolve(spec_dir, spec):
  p = os.path.normpath(os.path.join(spec_dir, spec))
  return p[:-3] + '.ts' if p.endswith('.js') else p
def rel(from_dir, target):
  r = os.path.relpath(target, from_dir)
  if not r.startswith('.'): r = './' + r
  return r[:-3] + '.js' if r.endswith('.ts') else r
changed = 0
for old in files:
  if not os.path.exists(old): continue
  new = moves.get(old, old)
  text = open(old).read()
  def sub(m):
    target = resolve(os.path.dirname(old), m.group(2))
    if not (os.path.exists(target) or target in moves): return m.group(0)
    target = moves.get(target, target)
    return m.group(1) + rel(os.path.dirname(new), target) + m.group(3)
  out = SPEC.sub(sub, text)
  if out != text:
    open(old, 'w').write(out); changed += 1
for old, new in moves.items():
  if os.path.exists(old):
    os.makedirs(os.path.dirname(new), exist_ok=True)
    subprocess.run(['git', 'mv', old, new], cwd=ROOT, check=True)
print('rewrote', changed, 'files; moved', len(moves))
