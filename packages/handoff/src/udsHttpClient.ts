import { connectUnix } from './unixStream.ts';

/**
 * A one-shot HTTP/1.1 POST over a unix socket.
 *
 * Hand-rolled on a byte stream rather than `node:http` because it runs on the plugin's hot path:
 * the plugin is one short process per pod and loading the http stack costs more than the request.
 * It speaks just enough HTTP for our own servers: `Connection: close`, a Content-Length or
 * read-to-EOF body, no chunked bodies (our servers always send Content-Length).
 */

export interface UdsResponse {
  status: number;
  body: string;
}

export class UdsConnectError extends Error {
  override name = 'UdsConnectError';
  readonly errno: string;
  constructor(socketPath: string, errno: string, message: string) {
    super(`failed to connect to ${socketPath}: ${message}`);
    this.errno = errno;
  }
}

export class UdsTimeoutError extends Error {
  override name = 'UdsTimeoutError';
}

const MAX_RESPONSE_BYTES = 4 << 20;

export function postJson(socketPath: string, path: string, body: unknown, timeoutMs: number): Promise<UdsResponse> {
  const payload = Buffer.from(JSON.stringify(body));
  const head =
    `POST ${path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${payload.length}\r\nConnection: close\r\n\r\n`;
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let connected = false;
    let settled = false;
    const finish = (err: Error | undefined, res?: UdsResponse): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      if (err) reject(err);
      else resolve(res as UdsResponse);
    };
    const timer = setTimeout(() => finish(new UdsTimeoutError(`no answer from ${socketPath} within ${timeoutMs} ms`)), timeoutMs);
    const socket = connectUnix(socketPath, {
      onConnect() {
        connected = true;
        // No half-close: node:http servers drop a request whose client already sent FIN.
        socket.write(Buffer.concat([Buffer.from(head), payload]));
      },
      onData(chunk) {
        size += chunk.length;
        if (size > MAX_RESPONSE_BYTES) {
          finish(new Error(`response from ${socketPath} exceeds ${MAX_RESPONSE_BYTES} bytes`));
          return;
        }
        chunks.push(chunk);
      },
      onError(err) {
        if (!connected) finish(new UdsConnectError(socketPath, err.code ?? 'UNKNOWN', err.message));
        else finish(err);
      },
      onClose() {
        try {
          finish(undefined, parseHttpResponse(Buffer.concat(chunks)));
        } catch (err) {
          finish(err as Error);
        }
      },
    });
  });
}

/** Parses a complete `Connection: close` HTTP/1.1 response. Exported for testing purposes only. */
export function parseHttpResponse(raw: Buffer): UdsResponse {
  const end = raw.indexOf('\r\n\r\n');
  if (end < 0) throw new Error('malformed HTTP response: no header terminator');
  const lines = raw.subarray(0, end).toString('latin1').split('\r\n');
  const statusLine = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? '');
  if (!statusLine) throw new Error(`malformed HTTP status line: ${JSON.stringify(lines[0])}`);
  let length: number | undefined;
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    if (colon < 0) continue;
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (name === 'content-length') length = Number.parseInt(value, 10);
    if (name === 'transfer-encoding' && value.toLowerCase() !== 'identity') {
      throw new Error(`unsupported transfer-encoding ${value}`);
    }
  }
  let bodyBytes = raw.subarray(end + 4);
  if (length !== undefined) {
    if (!Number.isFinite(length) || bodyBytes.length < length) {
      throw new Error('truncated HTTP response body');
    }
    bodyBytes = bodyBytes.subarray(0, length);
  }
  return { status: Number(statusLine[1]), body: bodyBytes.toString('utf8') };
}
