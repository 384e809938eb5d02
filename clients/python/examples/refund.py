"""The refund example through the client: start it, watch it, approve its
proposal. From the repository root, against a server with the refund
example's tools (rein serve --tools fixture:examples/refund/tools.json):
    python3 clients/python/examples/refund.py
REIN_SERVER (host:port[,host:port…]) and REIN_TOKEN say where and as whom."""
import json
import os

from google.protobuf import json_format
from rein_client import approvals_wanted, connect, pending_proposal, v1, waits_for_person

task = json.load(open("examples/refund/task.json"))
script = [json.loads(line) for line in open("examples/refund/model.jsonl") if line.strip()]
task["model"] = {"provider": "script", "script": script}  # the scripted model: offline, deterministic

with connect(os.environ.get("REIN_SERVER", "127.0.0.1:7233"), token=os.environ.get("REIN_TOKEN") or None) as rein:
    run = rein.start_run(json_format.ParseDict(task, v1.TaskContract())).run  # a request ID is generated
    for ev in rein.watch_run(run.run_id):  # each event once, in order, across reconnections
        print(ev.sequence, ev.WhichOneof("payload"))
        if ev.HasField("approval_requested"):
            proposal = ev.approval_requested.proposal  # tool, arguments, preview, hash
        if ev.HasField("status_changed") and ev.status_changed.to == v1.RUN_STATUS_NEEDS_APPROVAL:
            answer = rein.approve(run.run_id, proposal, reason="duplicate charge")
            if waits_for_person(answer):  # a write that needs several approvers waits for the others
                by = ", ".join(pending_proposal(answer).approved_by)
                print(f"{run.run_id} waits for {approvals_wanted(answer)} more approver(s): "
                      f"not {answer.principal}, who started it, nor {by}, who approved it")
                break
    done = rein.get_run(run.run_id)
    print(f"{done.run_id} {v1.RunStatus.Name(done.status)}: {done.result.text or done.last_error}")
