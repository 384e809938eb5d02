// Streams that stay live: each reconnects after a dropped connection from
// where it stopped, until the page that opened it is left.

export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
  });
}

// debounce calls fn once, ms after the last of a burst of calls.
export function debounce(fn: () => void, ms: number): () => void {
  let t: ReturnType<typeof setTimeout> | undefined;
  return () => {
    if (t !== undefined) clearTimeout(t);
    t = setTimeout(() => { t = undefined; fn(); }, ms);
  };
}

// watchChanges calls onChange after every status change of the caller's
// runs, resuming after the last change it saw when the stream drops.
export async function watchChanges(
  watch: (after: bigint, signal: AbortSignal) => AsyncIterable<{ change?: { cursor: bigint } }>,
  onChange: () => void,
  onState: (state: "live" | "reconnecting") => void,
  signal: AbortSignal,
): Promise<void> {
  let after = 0n;
  while (!signal.aborted) {
    try {
      onState("live");
      for await (const r of watch(after, signal)) {
        if (r.change) after = r.change.cursor;
        onChange();
      }
    } catch {
      if (signal.aborted) return;
    }
    onState("reconnecting");
    await sleep(1000, signal);
  }
}
