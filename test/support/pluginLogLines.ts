/** The JSON log lines a plugin exec wrote to stderr (non-JSON lines are kept as `{ raw }`). */
export function pluginLogLines(stderr: string): Record<string, unknown>[] {
  return stderr
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => {
      try {
        return JSON.parse(line) as Record<string, unknown>;
      } catch {
        return { raw: line };
      }
    });
}

/** The first log line with this message, or undefined. */
export function findLog(stderr: string, msg: string): Record<string, unknown> | undefined {
  return pluginLogLines(stderr).find((entry) => entry.msg === msg);
}
