// The pending page: every proposal and question waiting for a person,
// across the caller's runs, updated as runs change.
import { api, explain } from "./api";
import { h } from "./dom";
import { debounce, watchChanges } from "./live";
import { pendingCard } from "./proposal";
import { RunStatus, type Run } from "./gen/rein/v1/run_pb";

export function pendingPage(root: HTMLElement, signal: AbortSignal): void {
  const list = h("div", { class: "pending" });
  const live = h("span", { class: "live" }, "connecting");
  const error = h("p", { class: "outcome" });
  const load = async () => {
    try {
      const runs: Run[] = [];
      let pageToken = "";
      do {
        const got = await api.listRuns({ statuses: [RunStatus.NEEDS_APPROVAL, RunStatus.NEEDS_INPUT], pageSize: 200, pageToken }, { signal });
        runs.push(...got.runs);
        pageToken = got.nextPageToken;
      } while (pageToken);
      // A card being filled in stays as it is; the others are redrawn.
      const keep = new Map<string, Element>();
      for (const el of list.querySelectorAll(".card")) {
        const input = el.querySelector<HTMLInputElement | HTMLTextAreaElement>("input.reason, textarea");
        const answered = el.querySelector(".outcome")?.textContent;
        if ((input && input.value) || answered) keep.set(el.getAttribute("data-run") ?? "", el);
      }
      const cards: Element[] = runs.map((r) => keep.get(r.runId) ?? pendingCard(r, refresh)).filter((c): c is HTMLElement => c !== null);
      // A card just decided stays, with the server's answer, after its run moved on.
      for (const [id, el] of keep) if (!runs.some((r) => r.runId === id)) cards.push(el);
      list.replaceChildren(...(cards.length ? cards : [h("p", { class: "empty" }, "Nothing is waiting for a person.")]));
      error.textContent = "";
    } catch (err) {
      if (signal.aborted) return;
      error.className = "outcome refused";
      error.textContent = `could not list pending runs: ${explain(err)}`;
    }
  };
  const refresh = debounce(load, 250);
  root.replaceChildren(h("h2", {}, "Pending ", live), error, list);
  void load();
  void watchChanges(
    (after, s) => api.watchRuns({ afterCursor: after }, { signal: s }),
    refresh,
    (state) => { live.textContent = state; live.className = `live ${state}`; },
    signal);
}
