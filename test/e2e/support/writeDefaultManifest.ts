// `make manifests`: rewrites manifests/istio-cni.yaml from the chart (the rig's helm).
import { writeFileSync } from 'node:fs';
import { DEFAULT_MANIFEST, renderChart } from './chart.ts';

writeFileSync(DEFAULT_MANIFEST, await renderChart());
process.stdout.write(`wrote ${DEFAULT_MANIFEST}\n`);
