import type { CmdArgs, NetConf, PluginFuncs } from '@istio-cni/cni';

/** Plugin handlers that count their calls and can be told to fail. */
export interface FakePlugin extends PluginFuncs {
  calls: { add: number; del: number; check: number; gc: number; status: number };
  seen: { args: CmdArgs; conf: NetConf }[];
  failWith?: unknown;
}

export function fakePlugin(result: Record<string, unknown> = { cniVersion: '1.0.0' }): FakePlugin {
  const plugin: FakePlugin = {
    calls: { add: 0, del: 0, check: 0, gc: 0, status: 0 },
    seen: [],
    async add(args, conf) {
      plugin.calls.add++;
      plugin.seen.push({ args, conf });
      if (plugin.failWith !== undefined) throw plugin.failWith;
      return result;
    },
    async del(args, conf) {
      plugin.calls.del++;
      plugin.seen.push({ args, conf });
      if (plugin.failWith !== undefined) throw plugin.failWith;
    },
    async check(args, conf) {
      plugin.calls.check++;
      plugin.seen.push({ args, conf });
      if (plugin.failWith !== undefined) throw plugin.failWith;
    },
    async gc(args, conf) {
      plugin.calls.gc++;
      plugin.seen.push({ args, conf });
      if (plugin.failWith !== undefined) throw plugin.failWith;
    },
    async status(args, conf) {
      plugin.calls.status++;
      plugin.seen.push({ args, conf });
      if (plugin.failWith !== undefined) throw plugin.failWith;
    },
  };
  return plugin;
}

export function totalCalls(p: FakePlugin): number {
  return p.calls.add + p.calls.del + p.calls.check + p.calls.gc + p.calls.status;
}
