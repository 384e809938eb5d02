// A paused run's card: the proposal (tool, arguments, the preview exactly
// as hashed, a diff drawn as a diff, the hash, the expiry, who proposed it
// and who revised it) with approve, deny and edit, the question with an
// answer box, or the budget reached (budget.ts) with a raise.
import { fromBinary, toJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { StructSchema } from "@bufbuild/protobuf/wkt";
import { api, caller, explain, may } from "./api";
import { budgetCard } from "./budget";
import { button, diff, h, outcome } from "./dom";
import { approvalsWanted, decided, pauseEnds, plain, pretty, statusName } from "./format";
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
  const reason = h("input", { type: "text", class: "reason", placeholder: "reason (sent to the model)" });
  const end = h("input", { type: "checkbox", class: "end-run" });
  const decide = (verdict: ApprovalVerdict) => () => settle(answer, async () => {
    const got = await api.decideApproval({
      runId: run.runId, proposalId: p.proposalId, proposalHash: p.hash, verdict,
      reason: reason.value, endRun: verdict === ApprovalVerdict.REJECT && end.checked,
    });
    return decided(verdict === ApprovalVerdict.APPROVE, got.run, p.proposalId);
  }, done);
  const editor = argumentsEditor(run, p, reason, answer, done);
  // A write that needs several people says who else must approve it; one
  // who approved it already is not offered Approve again.
  const wanted = approvalsWanted(run, p);
  const mine = caller !== undefined && p.approvedBy.includes(caller.principal);
  const controls = may("approver")
    ? h("div", { class: "decide" },
        mine ? null : button("Approve", decide(ApprovalVerdict.APPROVE), { class: "approve" }), mine ? null : " ",
        reason, " ", h("label", {}, end, " end the run"), " ",
        button("Deny", decide(ApprovalVerdict.REJECT), { class: "deny" }), " ",
        button("Edit arguments", () => void editor.open(), { class: "edit" }),
        editor.el)
    : h("p", { class: "note" }, "deciding needs the approver role");
  // A tool that gave no preview says so: nothing else stands in for it.
  const preview = p.preview === undefined && !p.previewBlob
    ? h("p", { class: "note no-preview" }, `${p.tool} gave no preview of this write: review its arguments`)
    : h("details", {},
      h("summary", {}, "Preview, exactly as hashed"),
      h("pre", { class: "preview" }, pretty(p.preview)));
  if (preview instanceof HTMLDetailsElement) preview.open = d === undefined;
  return h("section", { class: "card proposal", "data-run": run.runId, "data-proposal": p.proposalId },
    h("h3", {}, `${p.tool} proposed in `, h("a", { href: `#/runs/${run.runId}` }, run.runId)),
    h("dl", {},
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
      h("dt", {}, "arguments"), h("dd", {}, h("pre", { class: "arguments" }, pretty(p.arguments)),
        p.uncheckedArguments ? h("p", { class: "note unchecked" }, "unchecked arguments: the tool has no input schema, so nothing checked them") : null),
    ),
    d !== undefined ? h("div", {}, h("h4", {}, "Diff"), diff(d)) : null,
    preview,
    wanted ? h("p", { class: "note waits" }, (mine ? "You approved it; the write " : "The write ") + wanted) : null,
    controls, answer);
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
function argumentsEditor(run: Run, p: Proposal, reason: HTMLInputElement, answer: HTMLElement, done: () => void) {
  const box = h("textarea", { class: "edit-arguments", rows: "8", spellcheck: "false" });
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
    h("label", {}, "Arguments, as JSON:"), box,
    button("Send revision", revise, { class: "revise" }));
  el.hidden = true;
  let filled = false;
  const open = async () => {
    el.hidden = !el.hidden;
    if (filled || el.hidden) return;
    box.disabled = true;
    try {
      box.value = JSON.stringify(await wholeArguments(run, p), null, 2);
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
