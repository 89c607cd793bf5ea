import { resolve } from 'node:path';

/**
 * Root of the upstream istio/istio test data copied into this repository (`testdata/upstream/`,
 * upstream's relative paths kept; see its README.md). Every test and benchmark reads upstream
 * fixtures and goldens from here, never from outside the checkout.
 */
export const UPSTREAM_TESTDATA = resolve(import.meta.dirname, '../../testdata/upstream');
