"""Start, watch and decide on runs against a real rein serve; each success
beside the refusal that is its twin."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import unittest

import grpc
from helpers import (
    PKG_DIR,
    REIN_BIN,
    REPO_DIR,
    TOKEN,
    payload,
    refund_contract,
    start_server,
    status_to,
    temp_dir,
    tokens_file,
    until,
)

import rein_client
from rein_client import (
    CancelledError,
    ConflictError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    OutOfRangeError,
    ReinError,
    connect,
    approvals_wanted,
    from_rpc_error,
    pause_ends,
    pending_proposal,
    v1,
    waits_for_person,
)


def assert_consecutive(test: unittest.TestCase, events, first: int = 1) -> None:
    """events are first, first+1, … with none twice."""
    test.assertEqual([e.sequence for e in events], list(range(first, first + len(events))))


class RunTest(unittest.TestCase):
    def client(self, srv, **kw):
        c = connect(srv.address, **kw)
        self.addCleanup(c.close)
        return c

    def approvers(self, n: int):
        """A server whose tokens file has two more approvers, alice and bob,
        and a run as TOKEN's operator of the refund example with its write
        needing n approvals, paused on it: a client for the starter and each
        approver, the run's ID and its proposal."""
        extra = [
            {"id": who, "tenant": "py", "roles": ["approver"], "token_sha256": hashlib.sha256(f"{who}-token".encode()).hexdigest()}
            for who in ("alice", "bob")
        ]
        srv = start_server(self, args=["--tokens", tokens_file(temp_dir(self), extra)])

        def needs(task, _script):
            for g in task["tools"]:
                if g["name"] == "refunds.create":
                    g["approvals"] = n

        starter = self.client(srv, token=TOKEN)
        run = starter.start_run(refund_contract(needs)).run
        with starter.watch_run(run.run_id) as watch:
            for ev in watch:
                if status_to(ev) == v1.RUN_STATUS_NEEDS_APPROVAL:
                    break
        proposal = pending_proposal(starter.get_run(run.run_id))
        self.assertIsNotNone(proposal)
        alice, bob = self.client(srv, token="alice-token"), self.client(srv, token="bob-token")
        return starter, alice, bob, run.run_id, proposal

    def test_two_approvers(self):
        """A write that needs two approvers: the first approval answers a run
        that still waits for a person, the second carries it on."""
        starter, alice, bob, run_id, proposal = self.approvers(2)
        self.assertTrue(waits_for_person(starter.get_run(run_id)))
        self.assertEqual(approvals_wanted(starter.get_run(run_id)), 2)

        first = alice.approve(run_id, proposal, reason="checked")
        self.assertTrue(waits_for_person(first), "after the first of two approvals the run waits for another approver")
        self.assertEqual(approvals_wanted(first), 1)
        self.assertEqual(list(pending_proposal(first).approved_by), ["alice"])

        second = bob.approve(run_id, proposal, reason="checked too")
        self.assertFalse(waits_for_person(second), v1.RunStatus.Name(second.status))
        self.assertEqual(approvals_wanted(second), 0)
        for _ in starter.watch_run(run_id):  # to its end
            pass
        self.assertEqual(starter.get_run(run_id).status, v1.RUN_STATUS_COMPLETED)

    def test_one_approver(self):
        """The twin: a write that needs one approver goes on with it."""
        _, alice, _, run_id, proposal = self.approvers(1)
        answer = alice.approve(run_id, proposal, reason="checked")
        self.assertFalse(waits_for_person(answer), v1.RunStatus.Name(answer.status))

    def paused_with(self, timeout: str, ttl: str):
        """A client of a new server, the start_run answer of the refund
        example with its timeout and proposal TTL set, and the run paused on
        its proposal."""
        c = self.client(start_server(self))

        def times(task, _script):
            task["budget"]["timeout"] = timeout
            task["approval"] = {"proposal_ttl": ttl}

        started = c.start_run(refund_contract(times))
        until("the run pauses", lambda: waits_for_person(c.get_run(started.run.run_id)))
        return c, started, c.get_run(started.run.run_id)

    def test_pause_ends_at_the_run_deadline(self):
        """A proposal TTL that outlives the run's deadline ends at the
        deadline, and start_run warns of it."""
        _, started, run = self.paused_with("120s", "3600s")
        self.assertEqual(len(started.warnings), 1)
        self.assertIn("proposal_ttl (1h0m0s) outlives contract.budget.timeout (2m0s)", started.warnings[0])
        end = pause_ends(run)
        self.assertIsNotNone(end)
        self.assertEqual(end.by, "run_deadline")
        self.assertEqual(end.at, run.deadline.ToDatetime(tzinfo=end.at.tzinfo))

    def test_pause_ends_when_the_proposal_expires(self):
        """The twin: a TTL shorter than the deadline ends when the proposal
        expires, with no warning; a run that waits no more has no end."""
        c, started, run = self.paused_with("3600s", "600s")
        self.assertEqual(started.warnings, ())
        end = pause_ends(run)
        self.assertIsNotNone(end)
        self.assertEqual(end.by, "proposal_ttl")
        self.assertEqual(end.at, run.pending.proposal.expires_at.ToDatetime(tzinfo=end.at.tzinfo))
        self.assertIsNone(pause_ends(c.cancel(run.run_id)))

    def test_refund_start_watch_approve(self):
        """The refund example: start, watch, approve its proposal, to
        completion; the same request ID is the same run, a new one another."""
        srv = start_server(self)
        c = self.client(srv)

        started = c.start_run(refund_contract())
        self.assertTrue(started.created)
        self.assertTrue(started.request_id.startswith("py-"))
        run = started.run
        self.assertTrue(run.run_id.startswith("run_"))

        seen = []
        approved = False
        for ev in c.watch_run(run.run_id):
            seen.append(ev)
            if status_to(ev) == v1.RUN_STATUS_NEEDS_APPROVAL:
                p = pending_proposal(c.get_run(run.run_id))
                self.assertIsNotNone(p, "a run that needs approval has a proposal pending")
                self.assertEqual(p.tool, "refunds.create")
                c.approve(run.run_id, p, reason="duplicate charge confirmed")
                approved = True
        self.assertTrue(approved)
        assert_consecutive(self, seen)
        kinds = [payload(e) for e in seen]
        for want in ("run_started", "approval_requested", "approval_decided", "write_committed"):
            self.assertIn(want, kinds)
        last = seen[-1]
        self.assertEqual(payload(last), "status_changed")
        # "from" is a keyword: from_ reads it, as getattr does.
        self.assertEqual(last.status_changed.from_, getattr(last.status_changed, "from"))
        self.assertEqual(last.status_changed.from_, v1.RUN_STATUS_RUNNING)
        end = c.get_run(run.run_id)
        self.assertEqual(end.status, v1.RUN_STATUS_COMPLETED)
        self.assertEqual(end.version, last.sequence)
        # Its twin: the approved proposal is no longer pending.
        with self.assertRaises(FailedPreconditionError):
            c.approve(run.run_id, p)

        # The same request ID is the same run, not a second one ...
        again = c.start_run(refund_contract(), request_id=started.request_id)
        self.assertEqual(again.run.run_id, run.run_id)
        self.assertFalse(again.created)
        # ... and its twin: another request ID is another run.
        other = c.start_run(refund_contract(), request_id=started.request_id + "-2")
        self.assertTrue(other.created)
        self.assertNotEqual(other.run.run_id, run.run_id)
        c.cancel(other.run.run_id)

        # list_runs lists it under its status, and not under another.
        self.assertIn(run.run_id, [r.run_id for r in c.list_runs(statuses=[v1.RUN_STATUS_COMPLETED]).runs])
        self.assertNotIn(run.run_id, [r.run_id for r in c.list_runs(statuses=[v1.RUN_STATUS_FAILED]).runs])

        # A watch from the middle yields the rest, and one from the head nothing.
        rest = list(c.watch_run(run.run_id, from_seq=5))
        assert_consecutive(self, rest, 5)
        self.assertEqual(rest[-1].sequence, last.sequence)
        self.assertEqual(list(c.watch_run(run.run_id, after_sequence=last.sequence)), [])

    def test_refusals_are_typed_errors(self):
        """Refusals are typed errors carrying the server's code and message."""
        srv = start_server(self)
        c = self.client(srv)

        # Not found: a read, a decision and a watch of a run that does not exist.
        with self.assertRaises(NotFoundError) as cm:
            c.get_run("run_nope")
        self.assertEqual(cm.exception.code_name, "NOT_FOUND")
        self.assertIn("run_nope", cm.exception.message)
        self.assertEqual(cm.exception.server, srv.address)
        self.assertIsNone(cm.exception.retry_delay)
        with self.assertRaises(NotFoundError):
            c.cancel("run_nope")
        with self.assertRaises(NotFoundError):
            for _ in c.watch_run("run_nope"):
                self.fail("a missing run has no events")

        # Invalid argument: a contract with no goal; the field is named.
        with self.assertRaises(InvalidArgumentError) as cm:
            c.start_run(refund_contract(lambda task, script: task.update(goal="")))
        self.assertTrue(any("goal" in v.field for v in cm.exception.field_violations), cm.exception.field_violations)

        # A run paused for approval: a wrong hash, input, steering and a
        # budget raise are refused.
        run = c.start_run(refund_contract()).run
        for ev in c.watch_run(run.run_id):
            if status_to(ev) == v1.RUN_STATUS_NEEDS_APPROVAL:
                break
        paused = c.get_run(run.run_id)
        p = pending_proposal(paused)
        wrong = v1.Proposal(proposal_id=p.proposal_id, hash="0" * 64)
        with self.assertRaises(FailedPreconditionError):
            c.approve(run.run_id, wrong)
        with self.assertRaises(FailedPreconditionError):
            c.input(run.run_id, "an answer to no question")
        with self.assertRaises(FailedPreconditionError) as cm:
            c.steer(run.run_id, "go on")
        self.assertIn("DecideApproval", cm.exception.message)
        with self.assertRaises(FailedPreconditionError):
            c.raise_budget(run.run_id, add_steps=1)

        # Out of range: a watch from beyond the run's head.
        with self.assertRaises(OutOfRangeError):
            for _ in c.watch_run(run.run_id, after_sequence=paused.version + 10):
                self.fail("nothing is beyond the head")

        # Deny and end it; every decision on the ended run is a failed
        # precondition.
        denied = c.deny(run.run_id, p, reason="not ours", end_run=True)
        self.assertEqual(denied.status, v1.RUN_STATUS_DENIED)
        with self.assertRaises(FailedPreconditionError) as cm:
            c.cancel(run.run_id, reason="too late")
        self.assertEqual(cm.exception.code_name, "FAILED_PRECONDITION")
        self.assertTrue(cm.exception.message)
        self.assertTrue(str(cm.exception).startswith("FAILED_PRECONDITION: "))
        with self.assertRaises(FailedPreconditionError):
            c.approve(run.run_id, p)

        # Conflict: importing a run that is already stored (AlreadyExists),
        # with the generated stub and from_rpc_error; the export is rein
        # export's (the line "rein-export 1", the RunExport, its SHA-256).
        env = dict(os.environ, HOME=srv.dir, REIN_CONFIG="")
        data = subprocess.run(
            [REIN_BIN, "export", run.run_id, "--server", srv.address], env=env, check=True, capture_output=True
        ).stdout
        exported = v1.RunExport.FromString(data[data.index(b"\n") + 1 : -32])
        self.assertEqual(exported.run_id, run.run_id)
        with self.assertRaises(ConflictError) as cm:
            try:
                c.runs.ImportRun(v1.ImportRunRequest(export=exported))
            except grpc.RpcError as e:
                raise from_rpc_error(e) from e
        self.assertEqual(cm.exception.code_name, "ALREADY_EXISTS")
        # Its twin: the same export under a run and request ID not stored is
        # imported.
        exported.run_id = "run_01M8ZZZZZZZZZZZZZZZZZZZZZZ"
        for ev in exported.events:
            ev.run_id = exported.run_id
            if payload(ev) == "run_started":
                ev.run_started.request_id = "py-imported"
        imported = c.runs.ImportRun(v1.ImportRunRequest(export=exported)).run
        self.assertEqual(imported.status, v1.RUN_STATUS_DENIED)

    def test_revise_input_raise_budget(self):
        """Revise (approve with edited arguments), input and raise_budget carry
        a run on; the superseded proposal, a steer of a paused run and a raise
        too small are refused."""
        srv = start_server(self)
        c = self.client(srv)

        # Revise the refund's arguments: a new proposal, then approve it.
        run = c.start_run(refund_contract()).run
        for ev in c.watch_run(run.run_id):
            if payload(ev) == "approval_requested":
                break
        first = pending_proposal(c.get_run(run.run_id))
        revised = c.revise(
            run.run_id, first, {"invoice_id": "INV-42", "amount": "1100.00", "currency": "EUR", "reason": "partial"}
        )
        second = pending_proposal(revised)
        self.assertIsNotNone(second)
        self.assertNotEqual(second.proposal_id, first.proposal_id)
        self.assertEqual(second.arguments["amount"], "1100.00")
        # The superseded proposal can no longer be approved; the revision can.
        with self.assertRaises(FailedPreconditionError):
            c.approve(run.run_id, first)
        c.approve(run.run_id, second)
        statuses = [status_to(ev) for ev in c.watch_run(run.run_id) if status_to(ev) is not None]
        self.assertEqual(statuses[-1], v1.RUN_STATUS_COMPLETED)

        # A question, answered; a budget pause, raised.
        def ask(task, script):
            task["budget"] = {"max_steps": 1, "on_exhausted": "BUDGET_ACTION_PAUSE"}
            script[:] = [
                {"decision": {"ask_human": {"question": "Which invoice?"}}},
                {"decision": {"final_answer": {"text": "done"}}},
            ]

        rid = c.start_run(refund_contract(ask)).run.run_id
        statuses = []
        for ev in c.watch_run(rid):
            to = status_to(ev)
            if to is None:
                continue
            statuses.append(to)
            if to == v1.RUN_STATUS_NEEDS_INPUT:
                # Steering a paused run is refused, naming the call that answers it.
                with self.assertRaises(FailedPreconditionError) as cm:
                    c.steer(rid, "hurry")
                self.assertIn("ProvideInput", cm.exception.message)
                c.input(rid, "INV-42")
            if to == v1.RUN_STATUS_NEEDS_BUDGET:
                # A raise that leaves the limit reached is refused; one that lifts it is not.
                with self.assertRaises(FailedPreconditionError):
                    c.raise_budget(rid, add_tokens=10)
                c.raise_budget(rid, add_steps=1, reason="one more")
        self.assertEqual(
            statuses,
            [
                v1.RUN_STATUS_NEEDS_INPUT,
                v1.RUN_STATUS_RUNNING,
                v1.RUN_STATUS_NEEDS_BUDGET,
                v1.RUN_STATUS_RUNNING,
                v1.RUN_STATUS_COMPLETED,
            ],
        )

    def test_cancel(self):
        """cancel ends a paused run; a second cancel is refused."""
        srv = start_server(self)
        c = self.client(srv)
        run = c.start_run(refund_contract()).run
        for ev in c.watch_run(run.run_id):
            if payload(ev) == "approval_requested":
                break
        cancelled = c.cancel(run.run_id, reason="test over")
        self.assertEqual(cancelled.status, v1.RUN_STATUS_CANCELLED)
        self.assertEqual(cancelled.status_reason, "test over")
        with self.assertRaises(FailedPreconditionError):
            c.cancel(run.run_id)

    def test_steer(self):
        """steer records a message to a running run once per request ID; an
        ended run refuses it."""
        srv = start_server(self)
        c = self.client(srv)

        # The model's first call takes a while, so that the run is running
        # when it is steered.
        def slow(task, script):
            script[0]["delay_ms"] = 1500

        run = c.start_run(refund_contract(slow)).run
        first = c.steer(run.run_id, "the customer is Acme Ltd", request_id="steer-1")
        self.assertTrue(first.created)
        again = c.steer(run.run_id, "the customer is Acme Ltd", request_id="steer-1")
        self.assertFalse(again.created)
        steered = 0
        for ev in c.watch_run(run.run_id):
            if payload(ev) == "run_steered":
                steered += 1
            if payload(ev) == "approval_requested":
                break
        self.assertEqual(steered, 1)
        c.cancel(run.run_id)
        with self.assertRaises(FailedPreconditionError):
            c.steer(run.run_id, "too late")

    def guarded_server(self):
        """A server with tokens: STARTER's operator and APPROVER's approver,
        of one tenant, each with that role only."""
        extra = [
            {"id": "py-starter", "tenant": "py", "roles": ["operator"], "token_sha256": sha256(STARTER)},
            {"id": "py-approver", "tenant": "py", "roles": ["approver"], "token_sha256": sha256(APPROVER)},
        ]
        return start_server(self, args=["--tokens", tokens_file(temp_dir(self), extra)])

    def test_example(self):
        """examples/refund.py runs the refund example to completion, on a
        server without tokens, and on one with tokens as an operator who
        starts and an approver who approves; refused, it says why and what
        to set, with no traceback."""
        srv = start_server(self)
        out = run_program(srv.address, EXAMPLE)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("approval_requested", out.stdout)
        self.assertIn("RUN_STATUS_COMPLETED: Refunded the duplicate charge", out.stdout)

        guarded = self.guarded_server()
        out = run_program(guarded.address, EXAMPLE, token=STARTER, approver=APPROVER)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("RUN_STATUS_COMPLETED: Refunded the duplicate charge", out.stdout)

        # The operator alone may start the run, not approve its write.
        refused = run_program(guarded.address, EXAMPLE, token=STARTER)
        self.assertEqual(refused.returncode, 1, refused.stderr)
        self.assertNotIn("Traceback", refused.stderr)
        self.assertRegex(refused.stderr, r"^refund.py: could not approve run_\w+'s write \(PERMISSION_DENIED: ")
        self.assertIn("set REIN_APPROVER_TOKEN", refused.stderr)
        # No token at all: refused at the start.
        refused = run_program(guarded.address, EXAMPLE)
        self.assertEqual(refused.returncode, 1, refused.stderr)
        self.assertNotIn("Traceback", refused.stderr)
        self.assertTrue(refused.stderr.startswith("refund.py: UNAUTHENTICATED: "), refused.stderr)

    def test_readme_snippet(self):
        """The README's "Start, watch, approve" program runs as written, as an
        operator who starts and an approver who approves, to completion; its
        twin, with the operator's token for the approval, is refused
        PermissionDenied and leaves the run waiting."""
        snippet = readme_program()
        self.assertIn('task["model"]', snippet)  # the model shown travelling in the contract
        guarded = self.guarded_server()
        out = run_program(guarded.address, snippet, token=STARTER, approver=APPROVER)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("approval_requested", out.stdout)
        self.assertIn("RUN_STATUS_COMPLETED Refunded the duplicate charge", out.stdout)

        refused = run_program(guarded.address, snippet, token=STARTER, approver=STARTER)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("PermissionDeniedError", refused.stderr)
        c = connect(guarded.address, token=STARTER)
        self.addCleanup(c.close)
        runs = c.list_runs(statuses=[v1.RUN_STATUS_NEEDS_APPROVAL]).runs
        self.assertEqual(len(runs), 1)

    def test_cancel_watch(self):
        """Breaking out of a watch closes its stream; cancel() ends a watch as
        CancelledError, with no reconnection; a watch left alone on a paused
        run stays open, and close() ends it."""
        srv = start_server(self)
        reconnects = []
        c = self.client(srv, on_reconnect=reconnects.append)

        def cancelled_on_server():
            return sum(
                1 for line in srv.log().splitlines() if "grpc.method=WatchRun" in line and "grpc.code=Canceled" in line
            )

        run = c.start_run(refund_contract()).run
        for ev in c.watch_run(run.run_id):
            if payload(ev) == "run_started":
                break
        until("the server to see the watch broken out of cancelled", lambda: cancelled_on_server() == 1)

        w = c.watch_run(run.run_id)
        seen = []
        with self.assertRaises(CancelledError) as cm:
            for ev in w:
                seen.append(ev)
                # A paused run keeps its watch open: only the cancel ends it.
                if status_to(ev) == v1.RUN_STATUS_NEEDS_APPROVAL:
                    w.cancel()
        self.assertIsInstance(cm.exception, ReinError)
        self.assertEqual(cm.exception.code_name, "CANCELLED")
        self.assertEqual(reconnects, [])
        self.assertEqual(payload(seen[-1]), "status_changed")
        self.assertEqual(w.after, seen[-1].sequence)
        until("the server to see the cancelled watch cancelled", lambda: cancelled_on_server() == 2)
        # Its twin: a watch that is not cancelled yields on as the run goes
        # on; close() ends the iteration.
        with c.watch_run(run.run_id, after_sequence=w.after) as w2:
            c.approve(run.run_id, pending_proposal(c.get_run(run.run_id)))
            ev = next(w2)
            self.assertEqual(ev.sequence, w.after + 1)
            self.assertEqual(payload(ev), "approval_decided")
            w2.close()
            self.assertEqual(list(w2), [])
        self.assertEqual(reconnects, [])


EXAMPLE = os.path.join(PKG_DIR, "examples", "refund.py")

# The tokens of guarded_server's principals: an operator only, an approver only.
STARTER = "py-client-starter-token"
APPROVER = "py-client-approver-token"


def sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def readme_program() -> str:
    """The ```python block of README.md's "Start, watch, approve" section, as
    written."""
    with open(os.path.join(PKG_DIR, "README.md")) as f:
        readme = f.read()
    section = readme.split("\n## Start, watch, approve\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```python\n(.*?)^```$", section, re.S | re.M)
    if len(blocks) != 1:
        raise AssertionError(f'README.md\'s "Start, watch, approve" has {len(blocks)} python blocks, want 1')
    return blocks[0]


def run_program(address: str, program: str, token: str = "", approver: str = "") -> subprocess.CompletedProcess:
    """Runs program (a file's path, or Python source) with this Python from
    the repository root, with REIN_SERVER, REIN_TOKEN and
    REIN_APPROVER_TOKEN set."""
    # The rein_client these tests use (installed, or src/ of a checkout).
    path = os.path.dirname(os.path.dirname(rein_client.__file__))
    env = dict(os.environ, REIN_SERVER=address, REIN_TOKEN=token, REIN_APPROVER_TOKEN=approver, PYTHONPATH=path)
    args = [program] if os.path.isfile(program) else ["-c", program]
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


if __name__ == "__main__":
    unittest.main()
