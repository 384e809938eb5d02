// What a proposal's card reads from its run's events: the tool results in
// the run's context before the proposal (the evidence the model acted on),
// and, for a revised proposal, the original arguments it was revised from.
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { api } from "./api";
import { plain } from "./format";
import type { Event } from "./gen/rein/v1/event_pb";

// Evidence is one tool result the run had read before the proposal.
export type Evidence = { sequence: bigint; tool: string; output?: JsonValue; error: string; truncated: boolean };

// Context is what a proposal's card shows from the run's events.
export type Context = { evidence: Evidence[]; original?: JsonObject; originalId?: string };

// proposalContext reads events (in sequence order) for the proposal
// proposalId: the tool results recorded before it was asked, and the
// arguments of the first proposal in its chain of revisions.
export function proposalContext(events: Event[], proposalId: string): Context {
  const asked = new Map<string, { seq: bigint; args?: JsonObject }>();
  const from = new Map<string, string>();
  for (const ev of events) {
    const p = ev.payload;
    if (p.case === "approvalRequested" && p.value.proposal) {
      asked.set(p.value.proposal.proposalId, { seq: ev.sequence, args: p.value.proposal.arguments });
    } else if (p.case === "proposalRevised" && p.value.proposal) {
      asked.set(p.value.proposal.proposalId, { seq: ev.sequence, args: p.value.proposal.arguments });
      from.set(p.value.proposal.proposalId, p.value.supersededProposalId);
    }
  }
  const at = asked.get(proposalId)?.seq;
  let root = proposalId;
  while (from.has(root)) root = from.get(root)!;
  const evidence: Evidence[] = [];
  for (const ev of events) {
    if (at !== undefined && ev.sequence >= at) break;
    const p = ev.payload;
    if (p.case === "toolReturned") {
      evidence.push({ sequence: ev.sequence, tool: p.value.tool, output: plain(p.value.output), error: p.value.error, truncated: p.value.truncated });
    }
  }
  return root === proposalId ? { evidence } : { evidence, original: asked.get(root)?.args, originalId: root };
}

// runEvents reads all of a run's events.
export async function runEvents(runId: string, signal?: AbortSignal): Promise<Event[]> {
  const events: Event[] = [];
  let pageToken = "";
  do {
    const got = await api.listEvents({ runId, pageToken, pageSize: 1000 }, { signal });
    events.push(...got.events);
    pageToken = got.nextPageToken;
  } while (pageToken);
  return events;
}
