// The waits between tries, of the watches and of retry(): doubling, with
// jitter, between a minimum and a maximum.

// How long a watch and retry() wait between tries: the first wait is
// minMs, each next one doubles (with jitter) up to maxMs. patienceMs, when
// set, is how long they go on trying a server that stays unavailable with
// no progress before they throw the last error; unset: for as long as the
// caller's signal allows.
export interface BackoffOptions {
  minMs?: number | undefined;
  maxMs?: number | undefined;
  patienceMs?: number | undefined;
}

export const DEFAULT_BACKOFF_MIN_MS = 50;
export const DEFAULT_BACKOFF_MAX_MS = 5000;

// Backoff is a client's BackoffOptions, its defaults filled in.
export type Backoff = BackoffOptions & { minMs: number; maxMs: number };

// resolveBackoff fills in the defaults of opts.
export function resolveBackoff(opts: BackoffOptions | undefined): Backoff {
  return {
    ...opts,
    minMs: opts?.minMs && opts.minMs > 0 ? opts.minMs : DEFAULT_BACKOFF_MIN_MS,
    maxMs: opts?.maxMs && opts.maxMs > 0 ? opts.maxMs : DEFAULT_BACKOFF_MAX_MS,
  };
}

// jitter is a pause in [wait/2, wait].
export function jitter(wait: number): number {
  return Math.floor(wait / 2 + Math.random() * (wait / 2 + 1));
}

// sleep waits ms, or until signal aborts (then it resolves false).
export function sleep(ms: number, signal: AbortSignal | undefined): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const done = (ok: boolean) => {
      clearTimeout(t);
      signal?.removeEventListener("abort", onAbort);
      resolve(ok);
    };
    const onAbort = () => done(false);
    const t = setTimeout(() => done(true), ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
