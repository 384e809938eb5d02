// How runs and events read in the console: statuses, budgets, and one
// readable line per event. Everything returned is plain text.
import { timestampDate, ValueSchema, type Timestamp, type Duration, type Value } from "@bufbuild/protobuf/wkt";
import { isMessage, toJson, type JsonValue } from "@bufbuild/protobuf";
import { RunStatus, type Proposal, type Run } from "./gen/rein/v1/run_pb";
import { ToolTier } from "./gen/rein/v1/contract_pb";
import type { Event } from "./gen/rein/v1/event_pb";
import { stableJson } from "./fields";

export const statuses: [RunStatus, string][] = [
  [RunStatus.QUEUED, "queued"],
  [RunStatus.RUNNING, "running"],
  [RunStatus.NEEDS_INPUT, "needs_input"],
  [RunStatus.NEEDS_APPROVAL, "needs_approval"],
  [RunStatus.NEEDS_BUDGET, "needs_budget"],
  [RunStatus.COMPLETED, "completed"],
  [RunStatus.BUDGET_EXHAUSTED, "budget_exhausted"],
  [RunStatus.FAILED, "failed"],
  [RunStatus.DENIED, "denied"],
  [RunStatus.EXPIRED, "expired"],
  [RunStatus.CANCELLED, "cancelled"],
];

export function statusName(s: RunStatus): string {
  return statuses.find(([v]) => v === s)?.[1] ?? "unspecified";
}

export function terminal(s: RunStatus): boolean {
  return s >= RunStatus.COMPLETED && s <= RunStatus.CANCELLED;
}

// approvalsWanted says who else must approve a write that needs several
// people: how many more approvals, and who may not give them (the run's
// starter, those who approved it). "" for a write that needs one.
export function approvalsWanted(run: Run, p: Proposal): string {
  const needed = Math.max(p.approvals, 1);
  const more = needed - p.approvedBy.length;
  if (needed < 2 || more <= 0) return "";
  const not = [`${run.principal}, who started the run`];
  if (p.approvedBy.length) not.push(`${p.approvedBy.join(", ")}, who approved it`);
  return `waits for ${more} more approver${more === 1 ? "" : "s"} (${p.approvedBy.length} of ${needed} approvals given): not ${not.join(", nor ")}`;
}

// decided is what a card says once a person's approval or rejection is in:
// the run's status, or, when an approval leaves the write waiting for
// another person, who else must approve it.
export function decided(approved: boolean, run: Run | undefined, proposalId: string): string {
  const a = run?.pending?.action;
  if (approved && run && a?.case === "proposal" && a.value.proposalId === proposalId) {
    const wanted = approvalsWanted(run, a.value);
    if (wanted) return `approved: the write ${wanted}`;
  }
  return `${approved ? "approved" : "denied"}: the run is ${statusName(run?.status ?? 0)}`;
}

export function date(t: Timestamp | undefined): Date | undefined {
  return t ? timestampDate(t) : undefined;
}

// time is t in the viewer's time zone, with its offset from UTC, so that
// a time read off the screen is never taken for another zone's.
export function time(t: Timestamp | undefined): string {
  const d = date(t);
  return d ? zoned(d) : "";
}

// zoned is d as "YYYY-MM-DD HH:MM:SS (UTC±HH:MM)" at offset minutes east
// of UTC (the viewer's, by default).
export function zoned(d: Date, offset = -d.getTimezoneOffset()): string {
  const at = new Date(d.getTime() + offset * 60000);
  const two = (n: number) => String(n).padStart(2, "0");
  const o = Math.abs(offset);
  return `${at.getUTCFullYear()}-${two(at.getUTCMonth() + 1)}-${two(at.getUTCDate())} ` +
    `${two(at.getUTCHours())}:${two(at.getUTCMinutes())}:${two(at.getUTCSeconds())} ` +
    `(UTC${offset < 0 ? "-" : "+"}${two(Math.floor(o / 60))}:${two(o % 60)})`;
}

export function seconds(d: Duration | undefined): string {
  if (!d) return "";
  const ms = Number(d.seconds) * 1000 + d.nanos / 1e6;
  return ms < 1000 ? `${ms.toFixed(1)}ms` : `${(ms / 1000).toFixed(2)}s`;
}

// plain is a google.protobuf.Value (a message here) or a Struct (already
// JSON here) as JSON.
export function plain(v: Value | JsonValue | undefined): JsonValue | undefined {
  if (v === undefined) return undefined;
  return isMessage(v, ValueSchema) ? toJson(ValueSchema, v) : (v as JsonValue);
}

// json is v as one line of JSON, its keys in the console's one order.
export function json(v: Value | JsonValue | undefined): string {
  return stableJson(plain(v));
}

export function pretty(v: Value | JsonValue | undefined): string {
  return stableJson(plain(v), 2);
}

function of(used: number | bigint, max: number | bigint | undefined): string {
  return max ? `${used} / ${max}` : `${used}`;
}

// usage is a run's steps, tokens, tool calls and cost against its budget.
export function usage(r: Run): { steps: string; tokens: string; tools: string; cost: string; deadline: string } {
  const b = r.contract?.budget;
  const tokens = (r.usage?.inputTokens ?? 0n) + (r.usage?.outputTokens ?? 0n);
  const cost = b?.maxCostUsd ? `$${r.costUsd.toFixed(4)} / $${b.maxCostUsd.toFixed(2)}` : `$${r.costUsd.toFixed(4)}`;
  return {
    steps: of(r.steps, b?.maxSteps),
    tokens: of(tokens, b?.maxTokens),
    tools: of(r.toolCalls, b?.maxToolCalls),
    cost,
    deadline: time(r.deadline),
  };
}

// pauseEnds says when a paused run's pause ends if no one acts, and what
// ends it, as the server derives it (pending.endsAt, endsBy): the earlier
// of the proposal's expiry and the run's deadline. "" when nothing ends it.
export function pauseEnds(r: Run): string {
  const p = r.pending;
  if (!p?.endsAt) return "";
  const by = p.endsBy === "run_deadline" ? "the run's deadline: the run then ends budget_exhausted"
    : p.endsBy === "proposal_ttl" ? "the proposal expires: the run then ends expired"
    : p.endsBy === "raise_ttl" ? "the pause for a raise expires: the run then ends expired"
    : p.endsBy;
  return `${time(p.endsAt)} (${by})`;
}

export function labels(m: { [k: string]: string } | undefined): string {
  return Object.entries(m ?? {})
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k}=${v}`)
    .join(" ");
}

// summary is an event's kind and its readable line.
export function summary(ev: Event): { kind: string; text: string } {
  const p = ev.payload;
  switch (p.case) {
    case "runStarted":
      return { kind: "run_started", text: `by ${p.value.principal}: ${p.value.contract?.goal ?? ""}` + (p.value.parentRunId ? ` (fork of ${p.value.parentRunId} at ${p.value.parentSequence})` : "") };
    case "modelRequested": {
      const prefix = p.value.prefixBytes > 0n ? `, begins with ${p.value.prefixBytes} bytes of the last call's input` : "";
      return { kind: "model_requested", text: `step ${p.value.step}, ${p.value.model}, ~${p.value.inputTokens} input tokens${prefix}` };
    }
    case "modelReturned": {
      const d = p.value.decision?.action;
      let what = "no decision";
      if (d?.case === "toolCall") what = `calls ${d.value.tool} ${json(d.value.arguments)}`;
      else if (d?.case === "finalAnswer") what = `answers: ${d.value.text}`;
      else if (d?.case === "askHuman") what = `asks: ${d.value.question}`;
      const u = p.value.usage;
      return { kind: "model_returned", text: `${what} (${u?.inputTokens ?? 0n} in, ${u?.outputTokens ?? 0n} out, ${seconds(p.value.duration)})` };
    }
    case "modelRetried":
      return { kind: "model_retried", text: `step ${p.value.step}: ${p.value.error}; retrying after ${seconds(p.value.wait)}` };
    case "contextCompacted":
      return { kind: "context_compacted", text: `step ${p.value.step}: ${p.value.compacted} items compacted, ${p.value.charsBefore} → ${p.value.charsAfter} characters` };
    case "decisionRejected":
      return { kind: "decision_rejected", text: `${p.value.error}: ${p.value.raw}` };
    case "toolRequested":
      return { kind: "tool_requested", text: `${p.value.tool} ${json(p.value.arguments)}` };
    case "toolRefused":
      return { kind: "tool_refused", text: `${p.value.tool}: ${p.value.reason}` };
    case "toolReturned":
      return {
        kind: "tool_returned",
        text: `${p.value.tool}` + (p.value.error ? ` failed: ${p.value.error}` : ` → ${json(p.value.output)}`) + (p.value.truncated ? ` (cut at ${p.value.outputBytes} bytes)` : "") + ` (${seconds(p.value.duration)})`,
      };
    case "approvalRequested": {
      const pr = p.value.proposal;
      return { kind: "approval_requested", text: `${pr?.tool ?? ""} proposal ${pr?.proposalId ?? ""}, hash ${pr?.hash ?? ""}, expires ${time(pr?.expiresAt)}` };
    }
    case "approvalDecided":
      return { kind: "approval_decided", text: `${ev.actor} ${p.value.approved ? "approved" : "rejected"} ${p.value.proposalId}` + (p.value.reason ? `: ${p.value.reason}` : "") + (p.value.endRun ? " (and ended the run)" : "") };
    case "inputRequested":
      return { kind: "input_requested", text: p.value.question?.text ?? "" };
    case "inputProvided":
      return { kind: "input_provided", text: `${ev.actor}: ${p.value.text}` };
    case "writeDispatched":
      return { kind: "write_dispatched", text: `${p.value.proposalId} as ${p.value.operationId}` };
    case "writeCommitted":
      return { kind: "write_committed", text: `${p.value.proposalId}: ${json(p.value.receipt)} (${seconds(p.value.duration)})` };
    case "writeRefused":
      return { kind: "write_refused", text: `${p.value.proposalId}: ${p.value.reason}` };
    case "writeOutcomeUnknown":
      return { kind: "write_outcome_unknown", text: `${p.value.proposalId}: ${p.value.error}` };
    case "checksCompleted":
      return { kind: "checks_completed", text: p.value.results.map((c) => `${c.name} ${c.passed ? "passed" : `failed (exit ${c.exitCode}): ${c.outputTail}`}`).join("; ") };
    case "budgetReached":
      return { kind: "budget_reached", text: `${p.value.limit}: ${p.value.detail}` };
    case "runSteered":
      return { kind: "run_steered", text: `${ev.actor}: ${p.value.text}` };
    case "budgetRaised": {
      const b = p.value;
      const added = [
        b.addSteps ? `+${b.addSteps} steps` : "",
        b.addTokens ? `+${b.addTokens} tokens` : "",
        b.addCostUsd ? `+$${b.addCostUsd.toFixed(2)}` : "",
        b.addToolCalls ? `+${b.addToolCalls} tool calls` : "",
        b.extendDeadline ? `deadline +${seconds(b.extendDeadline)}` : "",
      ].filter((s) => s);
      return { kind: "budget_raised", text: `${ev.actor} raised the budget: ${added.join(", ")}` + (b.reason ? ` (${b.reason})` : "") };
    }
    case "proposalRevised": {
      const r = p.value;
      const changes = r.changes.map((c) => `${c.path} ${c.before ? json(c.before) : "(none)"} → ${c.after ? json(c.after) : "(none)"}`);
      return { kind: "proposal_revised", text: `${ev.actor} revised ${r.supersededProposalId} into ${r.proposal?.proposalId ?? ""}: ${changes.join(", ")}` };
    }
    case "policyDecided": {
      const d = p.value;
      const effect = (["", "allow", "ask", "deny"][d.effect] ?? "decided");
      const source = (["", "contract", "server", "service"][d.source] ?? "");
      const by = d.source === 3 ? `policy service "${d.rule}"` + (d.latency ? ` in ${seconds(d.latency)}` : "") : `${source} rule "${d.rule}"`;
      return {
        kind: "policy_decided",
        text: `${d.tool} ${effect} by ${by}` + (d.approvals > 1 ? `, ${d.approvals} approvals` : "") + (d.when ? ` (when ${d.when})` : "") + (d.message ? `: ${d.message}` : "") + (d.error ? ` [failed closed: ${d.error}]` : ""),
      };
    }
    case "approvalGiven":
      return { kind: "approval_given", text: `${p.value.proposalId} approved by ${ev.actor} (${p.value.given} of ${p.value.needed})` };
    case "modelThrottled":
      return { kind: "model_throttled", text: `step ${p.value.step} waited ${seconds(p.value.wait)} for ${p.value.bucket}` };
    case "runAdmitted": {
      const w = p.value.waited ? seconds(p.value.waited) : "";
      return { kind: "run_admitted", text: (w ? `started after ${w} in the queue` : "started at once") + (p.value.by ? ` by ${p.value.by}` : "") };
    }
    case "runTaken":
      return { kind: "run_taken", text: `carried on by ${p.value.owner} (lease epoch ${p.value.epoch})` };
    case "toolChanged": {
      const c = p.value;
      const found = c.proposalId ? ` under proposal ${c.proposalId}` : c.callId ? ` at call ${c.callId}` : "";
      return { kind: "tool_changed", text: `${c.tool} changed (${c.changes.join(", ")})${found}: ${c.action}` };
    }
    case "toolAdopted":
      return { kind: "tool_adopted", text: `${ev.actor} moved ${p.value.tool} to its new definition (${p.value.changes.join(", ")})` };
    case "delegationStarted":
      return { kind: "delegation_started", text: `${p.value.children.length} child run(s): ` + p.value.children.map((c) => `${c.runId}: ${c.contract?.goal ?? ""}`).join("; ") };
    case "delegationReturned":
      return {
        kind: "delegation_returned",
        text: `${p.value.runId} ${statusName(p.value.status)}` + (p.value.reason ? ` (${p.value.reason})` : "") + (p.value.answer ? `: ${p.value.answer.text}` : "") + `, ${p.value.steps} steps, $${p.value.costUsd.toFixed(4)}`,
      };
    case "statusChanged":
      return {
        kind: "status_changed",
        text: `${statusName(p.value.from)} → ${statusName(p.value.to)}` + (p.value.reason ? `: ${p.value.reason}` : "") + (p.value.result ? `; answer: ${p.value.result.text}` : "") + (p.value.error ? `; error: ${p.value.error}` : ""),
      };
  }
  return { kind: "event", text: "" };
}

// approveDoes is one sentence of what Approve does to the proposal p.
export function approveDoes(run: Run, p: Proposal): string {
  const needed = Math.max(p.approvals, 1);
  const more = needed - p.approvedBy.length;
  if (more > 1) return `Approve adds your approval (${p.approvedBy.length + 1} of ${needed}); ${p.tool} runs only once all ${needed} have approved.`;
  const once = p.tier === ToolTier.READ
    ? `Approve runs ${p.tool} as a read with these arguments once; its output goes to the model`
    : `Approve runs ${p.tool} with these arguments once, with idempotency key op_${p.proposalId}`;
  return `${once}; the run ${run.runId} then goes on.`;
}
