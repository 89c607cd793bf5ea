import { readFileSync } from 'node:fs';

/** VmRSS of a live process in KiB, from /proc/<pid>/status; undefined once it is gone. */
export function readRssKiB(pid: number): number | undefined {
  try {
    const m = /^VmRSS:\s+(\d+)\s+kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

export interface RssWatch {
  /** Stops sampling; the highest and the number of samples seen. */
  stop(): { peakKiB: number; samples: number };
}

/** Samples a process's VmRSS every `intervalMs` until stopped, keeping the peak. */
export function watchPeakRss(pid: number, intervalMs = 20): RssWatch {
  let peakKiB = 0;
  let samples = 0;
  const sample = () => {
    const kib = readRssKiB(pid);
    if (kib === undefined) return;
    samples++;
    peakKiB = Math.max(peakKiB, kib);
  };
  sample();
  const timer = setInterval(sample, intervalMs);
  return {
    stop() {
      clearInterval(timer);
      sample();
      return { peakKiB, samples };
    },
  };
}
