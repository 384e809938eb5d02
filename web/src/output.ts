// The text of a run's model call in flight, as the run's watch streams it
// (WatchRunResponse.output, asked for with model_output): what the run
// page's "the model is writing" panel shows. Plain data, no DOM: the panel
// (src/writing.ts) draws it, as text.
import type { Event } from "./gen/rein/v1/event_pb";
import type { ModelOutput } from "./gen/rein/v1/run_service_pb";

// Writing is the call the panel shows and its text so far.
export type Writing = {
  // The sequence of the call's model_requested; its step; 1, or 2 for its
  // retry; whether it repeats a call a crash lost.
  requested: bigint;
  step: number;
  attempt: number;
  resumed: boolean;
  text: string;
  // The text's length in UTF-8 bytes: the offset its next piece starts at.
  bytes: bigint;
  // The call wrote more than the server streams of one call.
  truncated: boolean;
};

const utf8 = new TextEncoder();

// sameCall says whether a message is of the attempt w shows.
function sameCall(w: Writing, m: ModelOutput): boolean {
  return w.requested === m.requested && w.attempt === m.attempt && w.resumed === m.resumed;
}

// applyOutput is what the panel shows after message m, given it showed w
// (undefined: nothing). A message at offset 0 starts the text over (a new
// call, its retry, a call resumed after a crash, or the text so far for a
// watch that joined, or resumed, mid-call); one that carries on the text
// shown is added to it; any other (an offset that is not where the text
// shown ends) is ignored. A message that says the call is done ends it:
// nothing is shown, and the model_returned event that follows shows the
// reply.
export function applyOutput(w: Writing | undefined, m: ModelOutput): Writing | undefined {
  let base: Writing;
  if (m.offset === 0n) {
    base = { requested: m.requested, step: m.step, attempt: m.attempt, resumed: m.resumed, text: "", bytes: 0n, truncated: false };
  } else if (w && sameCall(w, m) && m.offset === w.bytes) {
    base = w;
  } else {
    return m.done && w?.requested === m.requested ? undefined : w;
  }
  if (m.done) return undefined;
  if (m.text === "" && m.truncated === base.truncated) return base; // nothing new
  return {
    ...base,
    text: base.text + m.text,
    bytes: base.bytes + BigInt(utf8.encode(m.text).length),
    truncated: base.truncated || m.truncated,
  };
}

// afterEvent is what the panel shows once event ev arrived, given it
// showed w: nothing once an event says the call is over (its reply, its
// retry, the run's status changing, a budget reached, the run taken over
// after a crash, or a later call), else w. The server sends the end of a
// call before the events that follow it; this covers a watch that resumed
// after the call ended while it was away.
export function afterEvent(w: Writing | undefined, ev: Event): Writing | undefined {
  if (!w || ev.sequence <= w.requested) return w;
  switch (ev.payload.case) {
    case "modelReturned":
    case "modelRetried":
    case "statusChanged":
    case "budgetReached":
    case "runTaken":
    case "modelRequested":
      return undefined;
  }
  return w;
}

// writingTitle is the panel's heading for w.
export function writingTitle(w: Writing): string {
  return `The model is writing… step ${w.step}` + (w.attempt > 1 ? " (retry)" : "") + (w.resumed ? " (sent again: the call before it was cut)" : "");
}
