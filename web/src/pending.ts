// The pending page: every proposal, question and budget reached waiting
// for a person, across the caller's runs, updated as runs change.
import { api, explain } from "./api";
import { h, reconcile } from "./dom";
import { debounce, watchChanges } from "./live";
import { pendingCard, pendingKey } from "./proposal";
import { RunStatus, type Run } from "./gen/rein/v1/run_pb";

export function pendingPage(root: HTMLElement, signal: AbortSignal): void {
  const list = h("div", { class: "pending" });
  const live = h("span", { class: "live" }, "connecting");
  const error = h("p", { class: "outcome" });
  // One load at a time: a change seen during one asks for another after it.
  let loading = false;
  let again = false;
  const load = async (): Promise<void> => {
    if (loading) {
      again = true;
      return;
    }
    loading = true;
    try {
      const runs: Run[] = [];
      let pageToken = "";
      do {
        const got = await api.listRuns({ statuses: [RunStatus.NEEDS_APPROVAL, RunStatus.NEEDS_INPUT, RunStatus.NEEDS_BUDGET], pageSize: 200, pageToken }, { signal });
        runs.push(...got.runs);
        pageToken = got.nextPageToken;
      } while (pageToken);
      // A card still showing what its run waits for stays as it is (with
      // what the person typed); a card answered stays with the answer,
      // unless, its answer in, its run waits on something new (a revised
      // proposal): that card takes its place.
      const drawn = new Map<string, HTMLElement>();
      for (const el of list.querySelectorAll<HTMLElement>(".card")) drawn.set(el.dataset.key ?? "", el);
      const cards: HTMLElement[] = [];
      for (const r of runs) {
        const card = drawn.get(pendingKey(r)) ?? pendingCard(r, refresh);
        if (card) cards.push(card);
      }
      const listed = new Set(runs.map((r) => r.runId));
      for (const el of drawn.values()) {
        const out = el.querySelector(".outcome");
        const replaced = listed.has(el.dataset.run ?? "") && !out?.classList.contains("sending");
        if (!cards.includes(el) && !replaced && out?.textContent) cards.push(el);
      }
      reconcile(list, cards.length ? cards : [list.querySelector(".empty") ?? h("p", { class: "empty" }, "Nothing is waiting for a person.")]);
      error.textContent = "";
    } catch (err) {
      if (signal.aborted) return;
      error.className = "outcome refused";
      error.textContent = `could not list pending runs: ${explain(err)}`;
    } finally {
      loading = false;
      if (again && !signal.aborted) {
        again = false;
        void load();
      }
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
