// The refund example through the client: start it as an operator, watch
// it, approve its proposal as an approver. From the repository root,
// against a server with the refund example's tools
// (./rein serve --tools fixture:examples/refund/tools.json):
//   node clients/typescript/dist/examples/refund.js
// On a server with tokens, REIN_TOKEN is an operator's (who starts) and
// REIN_APPROVER_TOKEN an approver's (who approves; REIN_TOKEN when unset).
// Refused, it says what to set on one line and exits 1.
import { readFileSync } from "node:fs";
import {
  approvalsWanted,
  connect,
  contractFromJson,
  pendingProposal,
  previewJson,
  ReinError,
  RunStatus,
  waitsForPerson,
  type JsonObject,
} from "@reinhq/rein-client";

const task = JSON.parse(readFileSync("examples/refund/task.json", "utf8")) as JsonObject;
const script = readFileSync("examples/refund/model.jsonl", "utf8").trim().split("\n").map((l) => JSON.parse(l) as JsonObject);
task["model"] = { provider: "script", script }; // the scripted model: offline, deterministic

const servers = (process.env.REIN_SERVER ?? "127.0.0.1:7233").split(",");
const rein = connect({ servers, token: process.env.REIN_TOKEN });
const approver = connect({ servers, token: process.env.REIN_APPROVER_TOKEN || process.env.REIN_TOKEN });
let step = "starting the run (as REIN_TOKEN, an operator)";
try {
  const { run } = await rein.startRun({ contract: contractFromJson(task) });
  let proposal;
  for await (const ev of rein.watchRun(run.runId)) {
    console.log(`${ev.sequence} ${ev.payload.case}`);
    if (ev.payload.case === "approvalRequested") proposal = ev.payload.value.proposal; // tool, arguments, preview, hash
    if (ev.payload.case === "statusChanged" && ev.payload.value.to === RunStatus.NEEDS_APPROVAL && proposal) {
      console.log(`${proposal.tool} would write ${JSON.stringify(previewJson(proposal))}`);
      step = "approving its write (as REIN_APPROVER_TOKEN, an approver)";
      const answer = await approver.approve(run.runId, proposal, { reason: "duplicate charge" });
      step = "watching the run";
      // A write that needs several approvers waits for the others: stop here.
      if (waitsForPerson(answer)) {
        const by = pendingProposal(answer)?.approvedBy.join(", ");
        console.log(`${run.runId} waits for ${approvalsWanted(answer)} more approver(s): not ${answer.principal}, who started it, nor ${by}, who approved it`);
        break;
      }
    }
  }
  const done = await rein.getRun(run.runId);
  console.log(`${done.runId} ${RunStatus[done.status]}: ${done.result?.text ?? done.lastError}`);
} catch (e) {
  if (!(e instanceof ReinError)) throw e;
  console.error(`refund: ${step} was refused: ${e.codeName}: ${e.rawMessage}; set REIN_TOKEN to an operator's token and REIN_APPROVER_TOKEN to an approver's (rein serve --tokens)`);
  process.exitCode = 1;
} finally {
  rein.close();
  approver.close();
}
