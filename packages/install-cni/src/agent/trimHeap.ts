import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

type Gc = (options: { type: 'major'; execution: 'async'; flavor: 'last-resort' }) => void;

let gc: Gc | undefined;

/**
 * Asks V8 for a full, memory-reducing collection (run as a task, off this call). V8's memory reducer
 * does the same once a process looks idle, but an agent verifying one pod every few hundred
 * milliseconds never does: the heap its pods' enrolment grew stayed committed (3.9 MiB above an
 * agent without verification, 110 ambient pods; docs/benchmarks.md "Continuous verification").
 */
export function trimHeap(): void {
  if (gc === undefined) {
    setFlagsFromString('--expose-gc');
    gc = runInNewContext('gc') as Gc;
  }
  gc({ type: 'major', execution: 'async', flavor: 'last-resort' });
}
