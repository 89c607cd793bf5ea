/**
 * `make bench`: every figure is a ratio against a baseline measured in the same run.
 * RUNS (default 30) sets the samples per scenario.
 */
import { benchPluginStartup } from './pluginStartup.ts';

const runs = Number.parseInt(process.env.RUNS ?? '30', 10);
console.log(`# istio-cni benchmarks (Node ${process.version}, ${runs} runs per scenario)`);
await benchPluginStartup(runs);
