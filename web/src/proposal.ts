// A paused run's card: the proposal (tool, arguments, the preview exactly
// as hashed, a diff drawn as a diff, the hash, the expiry, who proposed it)
// with approve and deny, or the question with an answer box.
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { api, explain, may } from "./api";
import { button, diff, h, outcome } from "./dom";
import { plain, pretty, statusName, time } from "./format";
import { ApprovalVerdict } from "./gen/rein/v1/run_service_pb";
import type { Run } from "./gen/rein/v1/run_pb";

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
// with whatever the person typed, until the key changes.
export function pendingKey(run: Run): string {
  const a = run.pending?.action;
  if (a?.case === "proposal") return `${run.runId}/${a.value.proposalId}/${a.value.hash}`;
  if (a?.case === "question") return `${run.runId}/question/${run.version}`;
  return "";
}

export function pendingCard(run: Run, done: () => void): HTMLElement | null {
  const action = run.pending?.action;
  if (action?.case !== "proposal" && action?.case !== "question") return null;
  const card = drawCard(run, action, done);
  card.dataset.key = pendingKey(run);
  return card;
}

// settle sends one person's action from a card and shows its answer. While
// the call is out the card says so (the pending page keeps a card whose
// outcome has text, so a live update that sees the run move on cannot drop
// the card before its answer arrives) and its buttons are off, so one click
// is one request. A refusal turns them back on; an accepted action leaves
// them off, since what the card showed is decided.
async function settle(answer: HTMLElement, send: () => Promise<string>, done: () => void): Promise<void> {
  const card = answer.closest(".card");
  const buttons = card ? [...card.querySelectorAll("button")] : [];
  for (const b of buttons) b.disabled = true;
  answer.className = "outcome sending";
  answer.textContent = "sending…";
  try {
    outcome(answer, true, await send());
    done();
  } catch (err) {
    outcome(answer, false, `refused: ${explain(err)}`);
    for (const b of buttons) b.disabled = false;
  }
}

function drawCard(run: Run, action: NonNullable<Run["pending"]>["action"] & { case: "proposal" | "question" }, done: () => void): HTMLElement {
  const answer = h("p", { class: "outcome", "aria-live": "polite" });
  if (action.case === "question") {
    const box = h("textarea", { class: "answer", rows: "3", placeholder: "your answer" });
    const send = button("Send answer", () => settle(answer, async () => {
      const got = await api.provideInput({ runId: run.runId, text: box.value });
      return `answered: the run is ${statusName(got.run?.status ?? 0)}`;
    }, done), { class: "send" });
    return h("section", { class: "card question", "data-run": run.runId },
      h("h3", {}, "Question from ", h("a", { href: `#/runs/${run.runId}` }, run.runId)),
      h("p", { class: "text" }, action.value.text),
      may("operator") ? h("div", {}, box, send) : h("p", { class: "note" }, "answering needs the operator role"),
      answer);
  }
  const p = action.value;
  const d = previewDiff(plain(p.preview));
  const reason = h("input", { type: "text", class: "reason", placeholder: "reason (sent to the model)" });
  const end = h("input", { type: "checkbox", class: "end-run" });
  const decide = (verdict: ApprovalVerdict) => () => settle(answer, async () => {
    const got = await api.decideApproval({
      runId: run.runId, proposalId: p.proposalId, proposalHash: p.hash, verdict,
      reason: reason.value, endRun: verdict === ApprovalVerdict.REJECT && end.checked,
    });
    return `${verdict === ApprovalVerdict.APPROVE ? "approved" : "denied"}: the run is ${statusName(got.run?.status ?? 0)}`;
  }, done);
  const controls = may("approver")
    ? h("div", { class: "decide" },
        button("Approve", decide(ApprovalVerdict.APPROVE), { class: "approve" }), " ",
        reason, " ", h("label", {}, end, " end the run"), " ",
        button("Deny", decide(ApprovalVerdict.REJECT), { class: "deny" }))
    : h("p", { class: "note" }, "deciding needs the approver role");
  const preview = h("details", {},
    h("summary", {}, "Preview, exactly as hashed"),
    h("pre", { class: "preview" }, pretty(p.preview)));
  preview.open = d === undefined;
  return h("section", { class: "card proposal", "data-run": run.runId, "data-proposal": p.proposalId },
    h("h3", {}, `${p.tool} proposed in `, h("a", { href: `#/runs/${run.runId}` }, run.runId)),
    h("dl", {},
      h("dt", {}, "proposed by"), h("dd", {}, run.principal),
      h("dt", {}, "goal"), h("dd", { class: "text" }, run.contract?.goal ?? ""),
      h("dt", {}, "hash"), h("dd", {}, h("code", { class: "hash" }, p.hash)),
      h("dt", {}, "expires"), h("dd", { class: "expires" }, time(p.expiresAt)),
      h("dt", {}, "arguments"), h("dd", {}, h("pre", { class: "arguments" }, pretty(p.arguments))),
    ),
    d !== undefined ? h("div", {}, h("h4", {}, "Diff"), diff(d)) : null,
    preview, controls, answer);
}
