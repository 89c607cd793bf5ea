import { readFileSync, statSync } from 'node:fs';
import { dispatch, ErrorCode, errorMessage, LATEST_VERSION, SUPPORTED_VERSIONS } from '@istio-cni/cni';
import { VERSION, createJsonLogger, parseLogThreshold } from '@istio-cni/handoff';
import { udsAgentClient } from './agentClient.ts';
import { createPluginFuncs } from './commands.ts';
import { LogForwarder } from './logForwarder.ts';
import { writeStdio } from './stdio.ts';

const ABOUT = `CNI plugin istio-cni ${VERSION}`;

function readStdin(): Buffer {
  try {
    return readFileSync(0);
  } catch {
    return Buffer.alloc(0);
  }
}

/** skel's guard: CNI_NETNS must not be the namespace the plugin itself runs in. */
function isPluginNetns(netns: string): boolean {
  try {
    const target = statSync(netns);
    const own = statSync('/proc/self/ns/net');
    return target.ino === own.ino && target.dev === own.dev;
  } catch {
    return false;
  }
}

async function main(): Promise<void> {
  if (process.argv.includes('--version')) {
    writeStdio(1, `${ABOUT}\nCNI protocol versions supported: ${SUPPORTED_VERSIONS.join(', ')}\n`);
    return;
  }
  const forwarder = new LogForwarder();
  const logger = createJsonLogger({
    scope: 'cni-plugin',
    sink: (line) => {
      writeStdio(2, line + '\n');
      forwarder.push(line);
    },
  });
  const funcs = createPluginFuncs({
    logger,
    agentFor: (config) => udsAgentClient(config.cniAgentRunDir),
    degraded: {
      // Loaded on demand: the API reader and the rule programming stay off the hot path.
      add: async (...a) => (await import('./degraded/realDegradedMode.ts')).runDegradedAdd(...a),
      check: async (...a) => (await import('./degraded/realDegradedMode.ts')).runDegradedCheck(...a),
      status: async (config) => (await import('./degraded/realDegradedMode.ts')).runDegradedStatus(config),
    },
    onConfig: (config) => {
      logger.setThreshold(parseLogThreshold(config.pluginLogLevel));
      forwarder.setRunDir(config.cniAgentRunDir);
    },
  });
  const outcome = await dispatch(process.env, readStdin(), funcs, ABOUT, { isPluginNetns });
  writeStdio(1, outcome.stdout);
  if (outcome.stderr) writeStdio(2, outcome.stderr);
  await forwarder.flush();
  process.exitCode = outcome.exitCode;
}

function fail(msg: string): void {
  writeStdio(1, JSON.stringify({ cniVersion: LATEST_VERSION, code: ErrorCode.Internal, msg }, null, 4) + '\n');
  process.exitCode = 1;
}

let settled = false;
// A promise that can never settle (a callback that never comes) empties the event loop with main()
// still pending, and the process would exit 0 with nothing on stdout: a success with no result.
process.on('beforeExit', () => {
  if (settled) return;
  settled = true;
  fail('istio-cni stopped before answering (internal error)');
});

main().then(
  () => {
    settled = true;
  },
  (err: unknown) => {
    settled = true;
    // dispatch() never throws; this is the last line of defence so the runtime still gets JSON.
    fail(errorMessage(err));
  },
);
