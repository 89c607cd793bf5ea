import type { DaemonProcess } from './daemonProcess.ts';

/** A daemon whose monitoring port is reachable from here, or what reads its /metrics another way (through a netns bridge). */
export type MetricsSource = DaemonProcess | (() => Promise<string>);

/** The value of one series of the daemon's /metrics (0 when absent): `name` with exactly `labels`. */
export async function metric(daemon: MetricsSource, name: string, labels: Record<string, string>): Promise<number> {
  const text =
    typeof daemon === 'function' ? await daemon() : await (await fetch(`http://127.0.0.1:${daemon.monitoringPort}/metrics`)).text();
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    const inside = line.slice(name.length + 1, line.indexOf('}'));
    const have = inside.split(',');
    if (want.every((w) => have.includes(w)) && have.length === want.length) return Number(line.split(' ').at(-1));
  }
  return 0;
}

/** Resolves after at least `passes` more checks of healthy pods: the loop has looked again. */
export async function morePasses(daemon: MetricsSource, passes: number): Promise<void> {
  const start = await metric(daemon, 'istio_cni_pod_verifications_total', { result: 'ok' });
  for (;;) {
    if ((await metric(daemon, 'istio_cni_pod_verifications_total', { result: 'ok' })) >= start + passes) return;
    await new Promise((r) => setTimeout(r, 100));
  }
}
