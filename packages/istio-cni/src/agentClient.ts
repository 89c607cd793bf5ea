import {
  HANDOFF_PATH,
  HANDOFF_TIMEOUT_MS,
  PLUGIN_EVENT_SOCKET,
  UdsConnectError,
  UdsTimeoutError,
  parseHandoffResponse,
  postJson,
  runDirPath,
  type HandoffRequest,
  type HandoffResponse,
  type UdsResponse,
} from '@istio-cni/handoff';

/** The agent could not be reached at all: no socket, nobody listening, or no answer in time. */
export class AgentUnreachableError extends Error {
  override name = 'AgentUnreachableError';
}

function isConnectionLost(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return code === 'ECONNRESET' || code === 'EPIPE' || (err instanceof Error && /no header terminator|truncated HTTP/.test(err.message));
}

export interface AgentClient {
  /** Throws {@link AgentUnreachableError} when the agent is not there; other errors are protocol faults. */
  call(request: HandoffRequest): Promise<HandoffResponse>;
}

export function udsAgentClient(runDir: string, timeoutMs = HANDOFF_TIMEOUT_MS): AgentClient {
  const socketPath = runDirPath(runDir, PLUGIN_EVENT_SOCKET);
  return {
    async call(request) {
      let res: UdsResponse;
      try {
        res = await postJson(socketPath, HANDOFF_PATH, request, timeoutMs);
      } catch (err) {
        // Not there, not answering, or gone mid-request (a restart): all mean "try again later".
        if (err instanceof UdsConnectError || err instanceof UdsTimeoutError || isConnectionLost(err)) {
          throw new AgentUnreachableError((err as Error).message);
        }
        throw err;
      }
      let body: unknown;
      try {
        body = JSON.parse(res.body);
      } catch {
        throw new Error(`istio-cni agent answered HTTP ${res.status} with a non-JSON body: ${res.body.slice(0, 200)}`);
      }
      return parseHandoffResponse(body);
    },
  };
}
