// The runs page: a live, filtered, paged list of the caller's runs.
import { api, explain } from "./api";
import { age, h } from "./dom";
import { date, labels, statusName, statuses, usage } from "./format";
import { debounce, watchChanges } from "./live";
import type { RunStatus } from "./gen/rein/v1/run_pb";

const pageSize = 20;

export function runsPage(root: HTMLElement, signal: AbortSignal): void {
  const status = h("select", { class: "status-filter", "aria-label": "status" }, h("option", { value: "" }, "any status"),
    ...statuses.map(([v, name]) => h("option", { value: String(v) }, name)));
  const label = h("input", { type: "text", class: "label-filter", placeholder: "labels: team=billing env=prod" });
  const live = h("span", { class: "live" }, "connecting");
  const body = h("tbody");
  const error = h("p", { class: "outcome" });
  const prev = h("button", { type: "button", class: "prev" }, "← newer");
  const next = h("button", { type: "button", class: "next" }, "older →");
  // tokens[i] is the page_token of page i; page 0 has none.
  let tokens = [""];
  let page = 0;

  const parseLabels = (): { [k: string]: string } | string => {
    const out: { [k: string]: string } = {};
    for (const part of label.value.split(/[\s,]+/).filter(Boolean)) {
      const i = part.indexOf("=");
      if (i <= 0) return `the label filter "${part}" is not KEY=VALUE`;
      out[part.slice(0, i)] = part.slice(i + 1);
    }
    return out;
  };

  // loads counts the listings asked for: a listing that answers after a
  // newer one was asked (the filters changed meanwhile) is dropped, so a
  // slow answer to an old filter never replaces the new filter's.
  let loads = 0;
  const load = async () => {
    const mine = ++loads;
    const ls = parseLabels();
    if (typeof ls === "string") {
      error.className = "outcome refused";
      error.textContent = ls;
      return;
    }
    try {
      const got = await api.listRuns({
        statuses: status.value ? [Number(status.value) as RunStatus] : [],
        labels: ls, pageSize, pageToken: tokens[page],
      }, { signal });
      if (mine !== loads) return;
      error.textContent = "";
      error.className = "outcome";
      const now = Date.now();
      body.replaceChildren(...got.runs.map((r) => {
        const u = usage(r);
        return h("tr", { class: "run", "data-run": r.runId, "data-status": statusName(r.status) },
          h("td", {}, h("a", { href: `#/runs/${r.runId}` }, r.runId)),
          h("td", { class: `status ${statusName(r.status)}` }, statusName(r.status) + (r.queuePosition ? ` #${r.queuePosition}` : "")),
          h("td", { class: "goal text" }, r.contract?.goal ?? ""),
          h("td", {}, u.steps), h("td", {}, u.tokens), h("td", {}, u.cost),
          h("td", { title: date(r.createdAt)?.toISOString() ?? "" }, age(date(r.createdAt), now)),
          h("td", { class: "labels" }, labels(r.contract?.labels)));
      }));
      tokens = tokens.slice(0, page + 1);
      if (got.nextPageToken) tokens.push(got.nextPageToken);
      prev.disabled = page === 0;
      next.disabled = tokens.length <= page + 1;
    } catch (err) {
      if (signal.aborted || mine !== loads) return;
      error.className = "outcome refused";
      error.textContent = `could not list runs: ${explain(err)}`;
    }
  };
  const refresh = debounce(load, 250);
  const restart = () => { tokens = [""]; page = 0; void load(); };
  status.addEventListener("change", restart);
  label.addEventListener("change", restart);
  prev.addEventListener("click", () => { if (page > 0) { page--; void load(); } });
  next.addEventListener("click", () => { if (tokens.length > page + 1) { page++; void load(); } });

  root.replaceChildren(
    h("h2", {}, "Runs ", live),
    h("div", { class: "filters" }, status, " ", label),
    error,
    h("table", { class: "runs" },
      h("thead", {}, h("tr", {}, ...["run", "status", "goal", "steps", "tokens", "cost", "age", "labels"].map((c) => h("th", {}, c)))),
      body),
    h("div", { class: "pager" }, prev, " ", next));
  void load();
  void watchChanges(
    (after, s) => api.watchRuns({ afterCursor: after }, { signal: s }),
    refresh,
    (state) => { live.textContent = state; live.className = `live ${state}`; },
    signal);
}
