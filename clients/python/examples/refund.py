"""The refund example through the client: start it, watch it, approve its
proposal. From the repository root, against a server with the refund
example's tools (rein serve --tools fixture:examples/refund/tools.json):
    python3 clients/python/examples/refund.py
REIN_SERVER (host:port[,host:port…]) says where. Against a server with
tokens (rein serve --tokens), REIN_TOKEN is the token of the operator who
starts the run and REIN_APPROVER_TOKEN that of the approver who approves its
write (a principal with the approver role; by default REIN_TOKEN's)."""
import json
import os
import sys

from google.protobuf import json_format
from rein_client import ReinError, approvals_wanted, connect, pending_proposal, v1, waits_for_person

task = json.load(open("examples/refund/task.json"))
script = [json.loads(line) for line in open("examples/refund/model.jsonl") if line.strip()]
# The model travels in the contract: here the example's scripted model,
# offline and deterministic; {"provider": "openai", "name": "…"} for a real one.
task["model"] = {"provider": "script", "script": script}

server = os.environ.get("REIN_SERVER", "127.0.0.1:7233")
token = os.environ.get("REIN_TOKEN") or None
approver_token = os.environ.get("REIN_APPROVER_TOKEN") or token


def main() -> None:
    with connect(server, token=token) as rein, connect(server, token=approver_token) as approver:
        run = rein.start_run(json_format.ParseDict(task, v1.TaskContract())).run  # a request ID is generated
        for ev in rein.watch_run(run.run_id):  # each event once, in order, across reconnections
            print(ev.sequence, ev.WhichOneof("payload"))
            if ev.HasField("approval_requested"):
                proposal = ev.approval_requested.proposal  # tool, arguments, preview, hash
            if ev.HasField("status_changed") and ev.status_changed.to == v1.RUN_STATUS_NEEDS_APPROVAL:
                try:
                    answer = approver.approve(run.run_id, proposal, reason="duplicate charge")
                except ReinError as e:
                    sys.exit(
                        f"refund.py: could not approve {run.run_id}'s write ({e}): set REIN_APPROVER_TOKEN "
                        "to the token of a principal with the approver role; the run waits, "
                        f"`rein approve {run.run_id}` decides it"
                    )
                if waits_for_person(answer):  # a write that needs several approvers waits for the others
                    by = ", ".join(pending_proposal(answer).approved_by)
                    print(f"{run.run_id} waits for {approvals_wanted(answer)} more approver(s): "
                          f"not {answer.principal}, who started it, nor {by}, who approved it")
                    break
        done = rein.get_run(run.run_id)
        print(f"{done.run_id} {v1.RunStatus.Name(done.status)}: {done.result.text or done.last_error}")


try:
    main()
except ReinError as e:  # a refusal or an unreachable server: its reason, not a traceback
    sys.exit(f"refund.py: {e}")
