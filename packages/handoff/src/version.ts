declare global {
  // Replaced at bundle time by scripts/build.ts (esbuild `define`).
  var ISTIO_CNI_BUILD_VERSION: string | undefined;
}

/** Version of this build; `0.0.0-dev` when running from source. */
export const VERSION: string = globalThis.ISTIO_CNI_BUILD_VERSION ?? '0.0.0-dev';
