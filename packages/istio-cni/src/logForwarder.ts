import { existsSync } from 'node:fs';
import { LOG_SOCKET, postJson, runDirPath } from '@istio-cni/handoff';

const FLUSH_TIMEOUT_MS = 1000;

/**
 * Buffers the plugin's log lines and sends them to the agent's log sink once, at exit (upstream `cni/pkg/plugin`:
 * `POST /log` on `<run>/log.sock`, a JSON array of encoded lines), only if the socket exists.
 * A missing or slow agent never delays the plugin by more than {@link FLUSH_TIMEOUT_MS}.
 */
export class LogForwarder {
  readonly #lines: string[] = [];
  #runDir: string | undefined;

  push(line: string): void {
    this.#lines.push(line);
  }

  setRunDir(runDir: string): void {
    this.#runDir = runDir;
  }

  async flush(): Promise<void> {
    if (this.#runDir === undefined || this.#lines.length === 0) return;
    const socketPath = runDirPath(this.#runDir, LOG_SOCKET);
    if (!existsSync(socketPath)) return;
    try {
      await postJson(socketPath, '/log', this.#lines.splice(0), FLUSH_TIMEOUT_MS);
    } catch {
      // The lines are on stderr already; the agent's copy is a convenience.
    }
  }
}
