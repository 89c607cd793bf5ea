/**
 * Only the side by side with upstream's Go agent (`make bench` runs it among the rest):
 * RUNS pairs per timed figure (default 30), PEER_STARTS daemon restarts (default 10), PEER_PODS pods (default 420);
 * PEER_ONLY=degraded measures only the plugin's ADD with no daemon running (and its peak RSS);
 * PEER_ONLY=plugin all the plugin's figures (VERSION, ADDs with the daemon, a burst, no daemon), no daemon restarts.
 */
import { benchUpstreamPeer } from './upstreamPeer.ts';

const int = (value: string | undefined, fallback: number) => (value === undefined ? fallback : Number.parseInt(value, 10));
console.log(`# istio-cni side by side with upstream (Node ${process.version}, ${new Date().toISOString()})`);
await benchUpstreamPeer({
  ...(process.env.PEER_ONLY === 'degraded' || process.env.PEER_ONLY === 'plugin' ? { only: process.env.PEER_ONLY } : {}),
  runs: int(process.env.RUNS, 30),
  starts: int(process.env.PEER_STARTS, 10),
  pods: int(process.env.PEER_PODS, 420),
});
