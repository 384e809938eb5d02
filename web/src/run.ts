// The run page: the run against its budget, its pending action, a box for
// a message to the run while it runs, its actions (cancel, fork at an
// event, download the export file), and its timeline, live, resuming
// after a dropped connection from the last event it showed, so no event
// is missed or shown twice; under it, the text of the model call in
// flight as the model writes it.
import { create, toJsonString } from "@bufbuild/protobuf";
import { api, explain, may } from "./api";
import { button, cut, h, outcome } from "./dom";
import { pauseEnds, statusName, summary, terminal, time, usage } from "./format";
import { debounce, sleep } from "./live";
import { pendingCard, pendingKey } from "./proposal";
import { writingPanel } from "./writing";
import type { Event } from "./gen/rein/v1/event_pb";
import { RunExportSchema } from "./gen/rein/v1/export_pb";
import { RunStatus, type Run } from "./gen/rein/v1/run_pb";

export function runPage(root: HTMLElement, runId: string, signal: AbortSignal, focus?: bigint): void {
  const head = h("div", { class: "run-head" });
  const pending = h("div", { class: "run-pending" });
  const steer = steerBox(runId);
  steer.hidden = true;
  const actions = h("div", { class: "actions" });
  const answer = h("p", { class: "outcome", "aria-live": "polite" });
  const live = h("span", { class: "live" }, "connecting");
  const timeline = h("tbody");
  const table = h("table", { class: "timeline", "data-last": "0", "data-reconnects": "0", "data-gaps": "0" },
    h("thead", {}, h("tr", {}, ...["#", "time", "actor", "event", "summary", ""].map((c) => h("th", {}, c)))),
    timeline);
  const writing = writingPanel();
  let current: Run | undefined;
  const reason = h("input", { type: "text", class: "cancel-reason", placeholder: "why cancel" });
  const cancelBox = h("span", {}, reason, " ", button("Cancel run", async () => {
    try {
      const got = await api.cancelRun({ runId, reason: reason.value });
      outcome(answer, true, `cancelled: the run is ${statusName(got.run?.status ?? 0)}`);
      refresh();
    } catch (err) {
      outcome(answer, false, `refused: ${explain(err)}`);
    }
  }, { class: "cancel" }), " ");
  cancelBox.hidden = true;
  actions.append(cancelBox, button("Download export", () => void download(), { class: "export" }));

  const showRun = (r: Run) => {
    current = r;
    const u = usage(r);
    head.replaceChildren(
      h("h2", {}, "Run ", h("code", {}, r.runId), " ", h("span", { class: `status ${statusName(r.status)}`, "data-status": statusName(r.status) }, statusName(r.status)), " ", live),
      h("p", { class: "goal text" }, r.contract?.goal ?? ""),
      h("dl", { class: "budget" },
        h("dt", {}, "steps"), h("dd", {}, u.steps),
        h("dt", {}, "tokens"), h("dd", {}, u.tokens),
        h("dt", {}, "tool calls"), h("dd", {}, u.tools),
        h("dt", {}, "cost"), h("dd", {}, u.cost),
        h("dt", {}, "deadline"), h("dd", {}, u.deadline),
        pauseEnds(r) ? h("dt", {}, "pause ends") : null, pauseEnds(r) ? h("dd", { class: "pause-ends" }, pauseEnds(r)) : null,
        h("dt", {}, "by"), h("dd", {}, `${r.principal} (${r.tenant})`),
        r.statusReason ? h("dt", {}, "why") : null, r.statusReason ? h("dd", { class: "text" }, r.statusReason) : null,
        r.result ? h("dt", {}, "answer") : null, r.result ? h("dd", { class: "text" }, r.result.text) : null,
        r.lastError ? h("dt", {}, "error") : null, r.lastError ? h("dd", { class: "text" }, r.lastError) : null));
    // The card stays while the run waits for the same thing (keeping what
    // the person typed), or once answered (keeping the answer).
    const shown = pending.querySelector<HTMLElement>(".card");
    const answered = shown?.querySelector(".outcome")?.textContent;
    if (!shown || (shown.dataset.key !== pendingKey(r) && (!answered || r.pending?.action.case))) {
      const card = pendingCard(r, refresh);
      pending.replaceChildren(...(card ? [card] : []));
    }
    // Built once, so a reason or message being typed survives the refreshes.
    cancelBox.hidden = terminal(r.status) || !may("operator");
    steer.hidden = r.status !== RunStatus.RUNNING;
  };
  const loadRun = async () => {
    try {
      const got = await api.getRun({ runId }, { signal });
      if (got.run) showRun(got.run);
    } catch (err) {
      if (!signal.aborted) outcome(answer, false, `could not read the run: ${explain(err)}`);
    }
  };
  const refresh = debounce(loadRun, 150);

  const fork = async (seq: bigint) => {
    try {
      const got = await api.forkRun({ runId, atSequence: seq, requestId: crypto.randomUUID() });
      answer.className = "outcome ok";
      answer.replaceChildren(`forked at ${seq}: `, h("a", { href: `#/runs/${got.run?.runId ?? ""}` }, got.run?.runId ?? ""));
    } catch (err) {
      outcome(answer, false, `refused: ${explain(err)}`);
    }
  };

  const row = (ev: Event) => {
    const s = summary(ev);
    const tr = h("tr", { class: `event ${s.kind}`, "data-seq": String(ev.sequence), id: `event-${ev.sequence}` },
      h("td", {}, String(ev.sequence)), h("td", { class: "time" }, time(ev.recordedAt)),
      h("td", { class: "actor" }, ev.actor), h("td", { class: "kind" }, s.kind),
      h("td", { class: "summary" }, cut(s.text)),
      h("td", {}, may("operator") ? button("fork here", () => void fork(ev.sequence), { class: "fork" }) : null));
    timeline.append(tr);
    // An event linked to (a card's evidence) is shown and marked.
    if (ev.sequence === focus) {
      tr.classList.add("target");
      tr.tabIndex = -1;
      tr.scrollIntoView({ block: "center" });
      tr.focus();
    }
  };

  // follow streams the timeline from the last event shown, again after
  // every drop, until the run is terminal and every event arrived.
  const follow = async () => {
    let last = 0n;
    let reconnects = 0;
    let gaps = 0;
    for (;;) {
      let ended = false;
      try {
        live.textContent = "live";
        live.className = "live live";
        // The model's text is not an event: the cursor stays the last
        // event's sequence.
        for await (const r of api.watchRun({ runId, afterSequence: last, modelOutput: true }, { signal })) {
          if (r.output) writing.output(r.output);
          const ev = r.event;
          if (!ev || ev.sequence <= last) continue;
          if (ev.sequence !== last + 1n) gaps++;
          row(ev);
          writing.event(ev);
          last = ev.sequence;
          table.dataset.last = String(last);
          table.dataset.gaps = String(gaps);
          refresh();
        }
        ended = true;
      } catch (err) {
        if (signal.aborted) return;
        outcome(answer, false, `the timeline's connection dropped (${explain(err)}); resuming after event ${last}`);
      }
      if (signal.aborted) return;
      if (ended && current && terminal(current.status)) {
        await loadRun();
        if (current && terminal(current.status)) {
          writing.clear();
          live.textContent = "ended";
          live.className = "live ended";
          return;
        }
      }
      live.textContent = "reconnecting";
      live.className = "live reconnecting";
      await sleep(1000, signal);
      if (signal.aborted) return;
      reconnects++;
      table.dataset.reconnects = String(reconnects);
    }
  };

  const download = async () => {
    try {
      const events: Event[] = [];
      let pageToken = "";
      do {
        const got = await api.listEvents({ runId, pageToken, pageSize: 1000 });
        events.push(...got.events);
        pageToken = got.nextPageToken;
      } while (pageToken);
      const refs = blobRefs(events);
      const blobs: { [k: string]: Uint8Array } = {};
      for (let i = 0; i < refs.length; i += 1000) {
        const got = await api.getBlobs({ runId, hashes: refs.slice(i, i + 1000) });
        Object.assign(blobs, got.blobs);
      }
      const x = create(RunExportSchema, { formatVersion: 1, runId, events, blobs });
      // The export's text form, which rein import, inspect and replay read.
      const text = JSON.stringify(JSON.parse(toJsonString(RunExportSchema, x, { useProtoFieldName: true })), null, 2) + "\n";
      const a = h("a", { href: URL.createObjectURL(new Blob([text], { type: "application/json" })), download: `${runId}.json` });
      a.click();
      setTimeout(() => URL.revokeObjectURL(a.href), 10000);
      outcome(answer, true, `exported ${events.length} events and ${refs.length} blobs to ${runId}.json`);
    } catch (err) {
      outcome(answer, false, `could not export: ${explain(err)}`);
    }
  };

  root.replaceChildren(head, pending, steer, actions, answer, h("h3", {}, "Timeline"), h("div", { class: "scroll" }, table), writing.el);
  void loadRun();
  void follow();
}

// steerBox is a box for a person's message to a running run: the model
// reads it with its next call. Each message is sent under its own request
// ID, so a message sent twice (a retried call) is recorded once. The box
// stays for the next message; the run page hides it when the run is not
// running.
function steerBox(runId: string): HTMLElement {
  const answer = h("p", { class: "outcome", "aria-live": "polite" });
  const text = h("textarea", { class: "steer-text", rows: "3", placeholder: "a message the model reads with its next call" });
  const send = button("Send message", async () => {
    if (!text.value.trim()) {
      outcome(answer, false, "not sent: the message is empty");
      return;
    }
    send.disabled = true;
    answer.className = "outcome sending";
    answer.textContent = "sending…";
    try {
      await api.steerRun({ runId, text: text.value, requestId: crypto.randomUUID() });
      text.value = "";
      outcome(answer, true, "sent: the model reads it with its next call");
    } catch (err) {
      outcome(answer, false, `refused: ${explain(err)}`);
    } finally {
      send.disabled = false;
    }
  }, { class: "steer" });
  return h("section", { class: "steer-box" },
    h("h3", {}, "Message to the run"),
    may("operator") ? h("div", {}, text, send) : h("p", { class: "note" }, "sending a message needs the operator role"),
    answer);
}

// blobRefs are the blobs a run's events reference, as the export holds them.
function blobRefs(events: Event[]): string[] {
  const seen = new Set<string>();
  for (const ev of events) {
    const p = ev.payload;
    if (p.case === "modelRequested") p.value.inputBlobs.forEach((b) => seen.add(b));
    if (p.case === "contextCompacted") p.value.items.forEach((i) => seen.add(i.blob));
    if (p.case === "approvalRequested") [p.value.proposal?.previewBlob, p.value.proposal?.argumentsBlob].forEach((b) => b && seen.add(b));
  }
  seen.delete("");
  return [...seen];
}
