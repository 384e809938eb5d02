// A paused run's card: the proposal (tool, arguments, the preview exactly
// as hashed, a diff drawn as a diff, the hash, the expiry, who proposed it
// and who revised it) with approve, deny and edit, the question with an
// answer box, or the budget reached (budget.ts) with a raise.
import { fromBinary, toJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { StructSchema } from "@bufbuild/protobuf/wkt";
import { api, caller, explain, may } from "./api";
import { budgetCard } from "./budget";
import { button, diff, h, kids, outcome, type Child } from "./dom";
import { proposalContext, runEvents, type Context } from "./evidence";
import { changeList, changes, fieldList, stableJson } from "./fields";
import { approveDoes, approvalsWanted, decided, pauseEnds, plain, statusName, usage } from "./format";
import { argumentsObject } from "./parse";
import { refuse, settle } from "./settle";
import { ApprovalVerdict } from "./gen/rein/v1/run_service_pb";
import type { Proposal, Run } from "./gen/rein/v1/run_pb";

// previewDiff finds the unified diff a file write's preview carries.
function previewDiff(v: JsonValue | undefined): string | undefined {
  if (typeof v === "string" && /^(---|\+\+\+|@@) /m.test(v)) return v;
  if (v && typeof v === "object" && !Array.isArray(v)) {
    const d = (v as JsonObject)["diff"];
    if (typeof d === "string") return d;
  }
  return undefined;
}

// pendingKey names what a run waits for: a card drawn for it stays valid,
// with whatever the person typed, until the key changes (a proposal's with
// each approval given, so that the card shows who approved it).
export function pendingKey(run: Run): string {
  const a = run.pending?.action;
  if (a?.case === "proposal") return `${run.runId}/${a.value.proposalId}/${a.value.hash}/${a.value.approvedBy.length}`;
  if (a?.case === "question") return `${run.runId}/question/${run.version}`;
  if (a?.case === "budget") return `${run.runId}/budget/${run.version}`;
  return "";
}

export function pendingCard(run: Run, done: () => void): HTMLElement | null {
  const action = run.pending?.action;
  let card: HTMLElement;
  if (action?.case === "proposal") card = proposalCard(run, action.value, done);
  else if (action?.case === "question") card = questionCard(run, action.value.text, done);
  else if (action?.case === "budget") card = budgetCard(run, action.value, done);
  else return null;
  card.dataset.key = pendingKey(run);
  return card;
}

function questionCard(run: Run, question: string, done: () => void): HTMLElement {
  const answer = h("p", { class: "outcome", "aria-live": "polite" });
  const box = h("textarea", { class: "answer", rows: "3", placeholder: "your answer" });
  const send = button("Send answer", () => settle(answer, async () => {
    const got = await api.provideInput({ runId: run.runId, text: box.value });
    return `answered: the run is ${statusName(got.run?.status ?? 0)}`;
  }, done), { class: "send" });
  return h("section", { class: "card question", "data-run": run.runId },
    h("h3", {}, "Question from ", h("a", { href: `#/runs/${run.runId}` }, run.runId)),
    h("p", { class: "text" }, question),
    pauseEnds(run) ? h("p", { class: "note expires" }, `ends ${pauseEnds(run)}`) : null,
    may("operator") ? h("div", {}, box, send) : h("p", { class: "note" }, "answering needs the operator role"),
    answer);
}

function proposalCard(run: Run, p: Proposal, done: () => void): HTMLElement {
  const answer = h("p", { class: "outcome", "aria-live": "polite" });
  const d = previewDiff(plain(p.preview));
  const id = `p-${p.proposalId}`;
  const decide = (verdict: ApprovalVerdict, reason: HTMLInputElement, end?: HTMLInputElement) => () => settle(answer, async () => {
    const got = await api.decideApproval({
      runId: run.runId, proposalId: p.proposalId, proposalHash: p.hash, verdict,
      reason: reason.value, endRun: end?.checked ?? false,
    });
    return decided(verdict === ApprovalVerdict.APPROVE, got.run, p.proposalId);
  }, done);
  // A write that needs several people says who else must approve it; one
  // who approved it already is not offered Approve again.
  const wanted = approvalsWanted(run, p);
  const mine = caller !== undefined && p.approvedBy.includes(caller.principal);
  let controls: HTMLElement;
  if (may("approver")) {
    // Each decision has its own form: its reason box, its options, its
    // button. "End the run" is Deny's.
    const approveReason = h("input", { type: "text", class: "reason approve-reason", id: `${id}-approve-reason` });
    const denyReason = h("input", { type: "text", class: "reason deny-reason", id: `${id}-deny-reason` });
    const end = h("input", { type: "checkbox", class: "end-run", id: `${id}-end-run` });
    const approveForm = mine ? null : form("approve-form", "Approve",
      h("p", { class: "approve-does" }, approveDoes(run, p)),
      h("label", { for: approveReason.id }, "Reason for approving (optional, sent to the model)"), approveReason,
      h("button", { type: "submit", class: "approve" }, "Approve"));
    approveForm?.addEventListener("submit", (e) => { e.preventDefault(); void decide(ApprovalVerdict.APPROVE, approveReason)(); });
    const denyForm = form("deny-form", "Deny",
      h("label", { for: denyReason.id }, "Reason for denying (sent to the model)"), denyReason,
      h("span", { class: "check" }, end, " ", h("label", { for: end.id }, "and end the run (denied) instead of letting the model go on")),
      h("button", { type: "submit", class: "deny" }, "Deny"));
    denyForm.addEventListener("submit", (e) => { e.preventDefault(); void decide(ApprovalVerdict.REJECT, denyReason, end)(); });
    const editor = argumentsEditor(run, p, answer, done);
    controls = h("div", { class: "decide" }, approveForm, denyForm,
      h("div", { class: "revise-box" }, button("Edit arguments", () => void editor.open(), { class: "edit", "aria-expanded": "false", "aria-controls": `${id}-editor` }), editor.el));
    editor.el.id = `${id}-editor`;
  } else {
    controls = h("p", { class: "note" }, "deciding needs the approver role");
  }
  // A tool that gave no preview says so: nothing else stands in for it.
  const previewValue = plain(p.preview);
  const preview = p.preview === undefined && !p.previewBlob
    ? h("p", { class: "note no-preview" }, `${p.tool} gave no preview of this write: review its arguments`)
    : h("details", { class: "preview-box" },
      h("summary", {}, "Preview, exactly as hashed" + (p.previewBlob ? " (a summary: the whole preview is in the run's export)" : "")),
      d !== undefined && typeof previewValue === "string" ? null : fieldList(previewValue, "fields preview"));
  if (preview instanceof HTMLDetailsElement) preview.open = d === undefined;
  const u = usage(run);
  // The revision's diff and the evidence come from the run's events.
  const revision = h("div", { class: "revision" });
  const evidence = h("section", { class: "evidence", "aria-label": "evidence" });
  if (p.revisedBy) revision.append(h("h4", {}, "Changed from the original"), h("p", { class: "note" }, "reading the run's events…"));
  void fillFromEvents(run, p, revision, evidence);
  return h("section", { class: "card proposal", "data-run": run.runId, "data-proposal": p.proposalId, "aria-labelledby": `${id}-title` },
    h("h3", { id: `${id}-title` }, `${p.tool} proposed in `, h("a", { href: `#/runs/${run.runId}` }, run.runId)),
    h("dl", { class: "facts" },
      h("dt", {}, "proposal"), h("dd", {}, h("code", { class: "proposal-id" }, p.proposalId)),
      h("dt", {}, "proposed by"), h("dd", {}, run.principal),
      p.revisedBy ? h("dt", {}, "revised by") : null, p.revisedBy ? h("dd", { class: "revised-by" }, p.revisedBy) : null,
      p.revisionReason ? h("dt", {}, "why revised") : null, p.revisionReason ? h("dd", { class: "revision-reason text" }, p.revisionReason) : null,
      p.policyRule ? h("dt", {}, "policy") : null,
      p.policyRule ? h("dd", { class: "policy" }, `rule "${p.policyRule}"` + (p.policyMessage ? `: ${p.policyMessage}` : "")) : null,
      p.approvals > 1 ? h("dt", {}, "approvals") : null,
      p.approvals > 1 ? h("dd", { class: "approvals" }, `${p.approvedBy.length} of ${p.approvals}` + (p.approvedBy.length ? ` (${p.approvedBy.join(", ")})` : "")) : null,
      h("dt", {}, "goal"), h("dd", { class: "text" }, run.contract?.goal ?? ""),
      h("dt", {}, "hash"), h("dd", {}, h("code", { class: "hash" }, p.hash)),
      h("dt", {}, "ends"), h("dd", { class: "expires", "data-ends-by": run.pending?.endsBy ?? "" }, pauseEnds(run)),
      h("dt", {}, "spent"), h("dd", { class: "spent" }, `tokens ${u.tokens}, cost ${u.cost}, tool calls ${u.tools}`),
    ),
    h("h4", {}, "Arguments" + (p.argumentsBlob ? " (a summary: Edit arguments reads them whole)" : "")),
    fieldList(p.arguments, "fields arguments"),
    p.uncheckedArguments ? h("p", { class: "note unchecked" }, "unchecked arguments: the tool has no input schema, so nothing checked them") : null,
    revision,
    d !== undefined ? h("div", {}, h("h4", {}, "Diff"), diff(d)) : null,
    preview,
    evidence,
    wanted ? h("p", { class: "note waits" }, (mine ? "You approved it; the write " : "The write ") + wanted) : null,
    controls, answer);
}

// form is one decision's form: a fieldset with its legend.
function form(cls: string, legend: string, ...children: Child[]): HTMLFormElement {
  return h("form", { class: cls }, h("fieldset", {}, h("legend", {}, legend), ...children));
}

// fillFromEvents draws what the card reads from the run's events: for a
// revision, what it changed from the original, field by field; and the
// tool results the run had read before the proposal, each linked to its
// event on the run's timeline.
async function fillFromEvents(run: Run, p: Proposal, revision: HTMLElement, evidence: HTMLElement): Promise<void> {
  evidence.replaceChildren(h("h4", {}, "Evidence: what the tools returned before this proposal"), h("p", { class: "note" }, "reading the run's events…"));
  let ctx: Context;
  try {
    ctx = proposalContext(await runEvents(run.runId), p.proposalId);
  } catch (err) {
    evidence.replaceChildren(h("h4", {}, "Evidence"), h("p", { class: "note" }, `could not read the run's events: ${explain(err)}`));
    revision.replaceChildren();
    return;
  }
  if (p.revisedBy) {
    const cs = ctx.original ? changes(ctx.original, p.arguments ?? {}) : [];
    revision.replaceChildren(...kids(h("h4", {}, `Changed from the original (${ctx.originalId ?? "unknown"}) by ${p.revisedBy}`),
      p.revisionReason ? h("p", { class: "text" }, `why: ${p.revisionReason}`) : null,
      ctx.original ? (cs.length ? changeList(cs) : h("p", { class: "note" }, "no field changed")) : h("p", { class: "note" }, "the original proposal is not in the run's events")));
  }
  const list = h("ol", { class: "evidence-list" });
  for (const e of ctx.evidence) {
    list.append(h("li", {},
      h("a", { href: `#/runs/${run.runId}/events/${e.sequence}` }, `#${e.sequence} ${e.tool}`),
      e.error ? h("span", { class: "text" }, ` failed: ${e.error}`) : null,
      e.truncated ? h("span", { class: "note" }, " (cut: the tool's output was longer)") : null,
      e.error ? null : h("details", {}, h("summary", {}, "result"), fieldList(e.output))));
  }
  evidence.replaceChildren(h("h4", {}, "Evidence: what the tools returned before this proposal"),
    ctx.evidence.length ? list : h("p", { class: "note" }, "no tool returned anything before this proposal"));
}

// wholeArguments are a proposal's arguments in full: inline, or read back
// from the blob that holds them when the proposal carries a summary.
async function wholeArguments(run: Run, p: Proposal): Promise<JsonObject> {
  if (!p.argumentsBlob) return p.arguments ?? {};
  const got = await api.getBlobs({ runId: run.runId, hashes: [p.argumentsBlob] });
  const b = got.blobs[p.argumentsBlob];
  if (!b) throw new Error(`the server sent no blob ${p.argumentsBlob} for the arguments`);
  return toJson(StructSchema, fromBinary(StructSchema, b)) as JsonObject;
}

// argumentsEditor is a proposal's arguments as JSON to edit, hidden until
// opened, and the button that sends them as a revision: the server checks
// them against the tool's schema and the tool previews them again, so the
// run waits on a new proposal. Text that is not a JSON object is refused
// here and sends nothing.
function argumentsEditor(run: Run, p: Proposal, answer: HTMLElement, done: () => void) {
  const box = h("textarea", { class: "edit-arguments", rows: "8", spellcheck: "false", id: `p-${p.proposalId}-edit` });
  const reason = h("input", { type: "text", class: "reason revise-reason", id: `p-${p.proposalId}-revise-reason` });
  const revise = () => {
    const args = argumentsObject(box.value);
    if (typeof args === "string") return refuse(answer, args);
    void settle(answer, async () => {
      const got = await api.decideApproval({
        runId: run.runId, proposalId: p.proposalId, proposalHash: p.hash,
        verdict: ApprovalVerdict.REVISE, arguments: args, reason: reason.value,
      });
      const next = got.run?.pending?.action;
      if (next?.case !== "proposal" || next.value.proposalId === p.proposalId) {
        throw new Error(`the server did not revise the proposal: the run is ${statusName(got.run?.status ?? 0)}`);
      }
      return `revised: proposal ${next.value.proposalId} waits for approval`;
    }, done);
  };
  const el = h("div", { class: "editor" },
    h("label", { for: box.id }, "Arguments, as JSON (keys in sorted order):"), box,
    h("label", { for: reason.id }, "Why revise (recorded with the revision)"), reason,
    button("Send revision", revise, { class: "revise" }));
  el.hidden = true;
  let filled = false;
  const open = async () => {
    el.hidden = !el.hidden;
    el.parentElement?.querySelector(".edit")?.setAttribute("aria-expanded", String(!el.hidden));
    if (filled || el.hidden) return;
    box.disabled = true;
    try {
      box.value = stableJson(await wholeArguments(run, p), 2);
      filled = true;
      box.focus();
    } catch (err) {
      outcome(answer, false, `could not read the whole arguments: ${explain(err)}`);
    } finally {
      box.disabled = false;
    }
  };
  return { el, open };
}
