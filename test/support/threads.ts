import { readFileSync, readdirSync } from 'node:fs';

/** Each thread's name (`/proc/<pid>/task/<tid>/comm`: a worker thread's `name`) and niceness (field 19 of its stat), by thread id. */
export function threadsOf(pid: number): Map<number, { name: string; niceness: number }> {
  return new Map(
    readdirSync(`/proc/${pid}/task`).map((tid) => {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      // The fields after the command name, which is in parentheses and may hold spaces.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      return [Number(tid), { name: readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim(), niceness: Number(fields[16]) }];
    }),
  );
}
