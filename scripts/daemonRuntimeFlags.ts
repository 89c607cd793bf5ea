/**
 * The V8 flags built into dist/install-cni (scripts/build.ts): a long-lived daemon of I/O glue on a
 * 2-core node: a 1 MiB young generation (default up to 16 MiB per semi-space) and no
 * TurboFan/Maglev, whose compiles cost CPU and map ~9 MiB of compiler code. Measured in
 * bench/ambient.ts (docs/decisions.md, "Daemon runtime flags"); benchmarks that stand in for the
 * daemon run with them too.
 */
export const DAEMON_EXEC_ARGV: readonly string[] = ['--max-semi-space-size=1', '--no-opt', '--no-maglev'];
