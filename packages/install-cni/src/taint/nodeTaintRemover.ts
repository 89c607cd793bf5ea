import type { Logger } from '@istio-cni/handoff';
import { errorMessage } from '@istio-cni/cni';
import { Backoff } from '@istio-cni/kube';
import type { JsonPatchOp, NodeTaintApi } from './nodeTaintApi.ts';

export const TAINT_EFFECT = 'NoSchedule';

export type TaintOutcome = 'removed' | 'absent' | 'stopped';

export interface NodeTaintRemoverOptions {
  api: NodeTaintApi;
  nodeName: string;
  taintKey: string;
  logger: Logger;
  /** First delay before retrying a failed GET or PATCH; doubles (jittered) up to `maxRetryDelayMs`. */
  retryDelayMs?: number;
  maxRetryDelayMs?: number;
}

export interface NodeTaintRemover {
  /** Feed every readiness change; the first `true` starts the removal. */
  readinessChanged(ready: boolean): void;
  /** Settles once the taint is gone (or was never there), or the remover is stopped. */
  readonly done: Promise<TaintOutcome>;
  stop(): void;
}

/**
 * Lifts the node readiness taint once this daemon is ready (plugin installed, agent synced), so
 * pods are only scheduled onto a node that will capture them. It only ever removes, and only
 * once: operators add the taint when the node registers (kubelet `--register-with-taints`).
 * The patch tests the entry's key and effect at its index before removing it, so a concurrent
 * change to the node's taints fails the patch (retried from a fresh GET) instead of removing the
 * wrong taint.
 */
export function createNodeTaintRemover(options: NodeTaintRemoverOptions): NodeTaintRemover {
  const { api, nodeName, taintKey } = options;
  const log = options.logger.with({ node: nodeName, taint: `${taintKey}:${TAINT_EFFECT}` });
  const backoff = new Backoff({ initialMs: options.retryDelayMs ?? 1000, maxMs: options.maxRetryDelayMs ?? 30_000 });
  let ready = false;
  let started = false;
  let finished = false;
  let attemptRunning = false;
  let retryDue = false;
  let timer: NodeJS.Timeout | undefined;
  let settle: (o: TaintOutcome) => void = () => {};
  const done = new Promise<TaintOutcome>((resolve) => (settle = resolve));

  const finish = (outcome: TaintOutcome): void => {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    settle(outcome);
  };

  async function attempt(): Promise<void> {
    if (finished || attemptRunning) return;
    attemptRunning = true;
    try {
      const taints = await api.getTaints(nodeName);
      const index = taints.findIndex((t) => t.key === taintKey && t.effect === TAINT_EFFECT);
      if (index < 0) {
        log.info('node readiness taint not present; nothing to remove');
        finish('absent');
        return;
      }
      const path = `/spec/taints/${index}`;
      const ops: JsonPatchOp[] = [
        { op: 'test', path: `${path}/key`, value: taintKey },
        { op: 'test', path: `${path}/effect`, value: TAINT_EFFECT },
        { op: 'remove', path },
      ];
      await api.patchNode(nodeName, ops);
      log.info('daemon ready: node readiness taint removed');
      finish('removed');
    } catch (err) {
      if (finished) return;
      const delay = backoff.next();
      log.warn('failed to remove the node readiness taint; retrying', { error: errorMessage(err), retryInMs: delay });
      timer = setTimeout(() => {
        // Only while still ready; otherwise the next readiness change resumes.
        if (ready) void attempt();
        else retryDue = true;
      }, delay);
      timer.unref();
    } finally {
      attemptRunning = false;
    }
  }

  return {
    readinessChanged(isReady) {
      ready = isReady;
      if (!isReady || finished) return;
      if (!started) {
        started = true;
        void attempt();
      } else if (retryDue) {
        retryDue = false;
        void attempt();
      }
    },
    done,
    stop: () => finish('stopped'),
  };
}
