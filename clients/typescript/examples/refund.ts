// The refund example through the client: start it, watch it, approve its
// proposal. From the repository root, against a server with the refund
// example's tools (./rein serve --tools fixture:examples/refund/tools.json):
//   node clients/typescript/dist/examples/refund.js
import { readFileSync } from "node:fs";
import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { approvalsWanted, connect, pendingProposal, RunStatus, TaskContractSchema, waitsForPerson } from "@reinhq/rein-client";

const task = JSON.parse(readFileSync("examples/refund/task.json", "utf8")) as JsonObject;
const script = readFileSync("examples/refund/model.jsonl", "utf8").trim().split("\n").map((l) => JSON.parse(l) as JsonObject);
task["model"] = { provider: "script", script }; // the scripted model: offline, deterministic

const rein = connect({ servers: (process.env.REIN_SERVER ?? "127.0.0.1:7233").split(","), token: process.env.REIN_TOKEN });
const { run } = await rein.startRun({ contract: fromJson(TaskContractSchema, task) });
let proposal;
for await (const ev of rein.watchRun(run.runId)) {
  console.log(`${ev.sequence} ${ev.payload.case}`);
  if (ev.payload.case === "approvalRequested") proposal = ev.payload.value.proposal; // tool, arguments, preview, hash
  if (ev.payload.case === "statusChanged" && ev.payload.value.to === RunStatus.NEEDS_APPROVAL && proposal) {
    const answer = await rein.approve(run.runId, proposal, { reason: "duplicate charge" });
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
rein.close();
