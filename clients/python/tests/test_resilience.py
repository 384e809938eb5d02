"""What the client does when servers die, restart or are not there, and what
it sends to prove who it is; each success beside its failure twin."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import unittest

from helpers import (
    TOKEN,
    VIEWER_TOKEN,
    free_port,
    payload,
    refund_contract,
    start_server,
    status_to,
    temp_dir,
    tokens_file,
)

from rein_client import (
    Backoff,
    Reconnect,
    ReconnectCause,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    PlaintextTokenError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
    connect,
    pending_proposal,
    v1,
)

FAST = Backoff(min=0.02, max=0.2)


def slow_refund() -> v1.TaskContract:
    """A refund run that reads the invoice a few times, each model call
    taking a while, so that it is running for about a second before it
    proposes the refund."""

    def change(task, script):
        task["budget"] = {"max_steps": 20, "timeout": "120s"}
        read = script[0]
        reads = [
            dict(
                read,
                delay_ms=150,
                decision={"tool_call": {"tool": "invoices.get", "arguments": {"invoice_id": "INV-42"}, "call_id": f"r{i}"}},
            )
            for i in range(6)
        ]
        script[0:1] = reads

    return refund_contract(change)


def stored_events(c, run_id):
    return list(c.runs.ListEvents(v1.ListEventsRequest(run_id=run_id, page_size=10000)).events)


class ResilienceTest(unittest.TestCase):
    def client(self, servers, **kw):
        c = connect(servers, **kw)
        self.addCleanup(c.close)
        return c

    def assert_gap_free(self, events, stored):
        """events are 1, 2, 3, … with none twice, and are the run's whole
        log as the server stores it."""
        seqs = [e.sequence for e in events]
        self.assertEqual(seqs, list(range(1, len(seqs) + 1)))
        self.assertEqual(
            [f"{e.sequence}:{payload(e)}" for e in events], [f"{e.sequence}:{payload(e)}" for e in stored]
        )

    def watch_across_restart(self, sig):
        srv = [start_server(self)]
        reconnects = []
        found_gone = threading.Event()

        def told(rc):
            reconnects.append(rc)
            found_gone.set()

        c = self.client(srv[0].address, backoff=FAST, on_reconnect=told)
        run = c.start_run(slow_refund()).run
        seen = []
        restarter = None
        failures = []
        status_when_killed = None
        w = c.watch_run(run.run_id)
        for ev in w:
            seen.append(ev)
            if ev.sequence == 4 and restarter is None:
                # Kill the server under the open watch while the run is
                # running, and start it again on the same port and data
                # directory once the watch has found it gone.
                status_when_killed = c.get_run(run.run_id).status
                old = srv[0]

                def restart():
                    try:
                        old.kill(sig)
                        if not found_gone.wait(30):
                            raise AssertionError("the watch did not find the server gone")
                        srv[0] = start_server(self, directory=old.dir, port=old.port)
                    except BaseException as e:  # reported by the test's thread
                        failures.append(e)
                        w.cancel()

                restarter = threading.Thread(target=restart)
                restarter.start()
            if status_to(ev) == v1.RUN_STATUS_NEEDS_APPROVAL:
                c.approve(run.run_id, pending_proposal(c.get_run(run.run_id)))
        restarter.join()
        self.assertEqual(failures, [])
        self.assertEqual(status_when_killed, v1.RUN_STATUS_RUNNING)
        # One outage, told once, however many tries it took, with a typed
        # reason rather than gRPC's text.
        self.assertEqual(len(reconnects), 1, [str(rc) for rc in reconnects])
        rc = reconnects[0]
        self.assertIsInstance(rc, Reconnect)
        self.assertEqual(rc.cause, ReconnectCause.UNAVAILABLE)
        self.assertEqual(rc.server, srv[0].address)
        self.assertGreaterEqual(rc.attempt, 1)
        self.assertGreater(rc.wait, 0)
        self.assertIsInstance(rc.error, UnavailableError)
        self.assertEqual(
            str(rc),
            f"watch lost its stream from {srv[0].address} (unavailable, UNAVAILABLE); try {rc.attempt + 1} in {rc.wait:.2f} s",
        )
        self.assert_gap_free(seen, stored_events(c, run.run_id))
        self.assertIn("write_committed", [payload(e) for e in seen])
        self.assertEqual(c.get_run(run.run_id).status, v1.RUN_STATUS_COMPLETED)

    def test_watch_survives_sigkill_restart(self):
        """A watch survives its server SIGKILLed and restarted mid-run:
        gap-free, no duplicates."""
        self.watch_across_restart(signal.SIGKILL)

    def test_watch_survives_sigterm_restart(self):
        """A watch survives its server stopped (SIGTERM) and restarted mid-run:
        gap-free, no duplicates."""
        self.watch_across_restart(signal.SIGTERM)

    def test_watch_gives_up_after_patience(self):
        """A watch whose server is killed and stays down raises Unavailable
        after its patience, having yielded each event once."""
        srv = start_server(self)
        c = self.client(srv.address, backoff=Backoff(min=0.02, max=0.1, patience=0.5))
        run = c.start_run(slow_refund()).run
        seen = []
        with self.assertRaises(UnavailableError) as cm:
            for ev in c.watch_run(run.run_id):
                seen.append(ev)
                if ev.sequence == 3:
                    srv.kill(signal.SIGKILL)
        self.assertEqual(cm.exception.server, srv.address)
        self.assertEqual([e.sequence for e in seen], list(range(1, len(seen) + 1)))
        self.assertGreaterEqual(len(seen), 3)

    def test_watch_runs_across_restart(self):
        """watch_runs follows status changes across a restart from its cursor,
        each once; a bad filter is refused, not retried."""
        srv = start_server(self)
        c = self.client(srv.address, backoff=FAST)
        run = c.start_run(refund_contract()).run
        changes = []
        restarted = False
        with c.watch_runs(labels={"example": "refund"}) as w:
            for ch in w:
                changes.append(ch)
                if ch.run_id == run.run_id and ch.status == v1.RUN_STATUS_NEEDS_APPROVAL and not restarted:
                    # Restart the server under the open watch, then decide on
                    # the restarted one.
                    restarted = True
                    srv.kill(signal.SIGKILL)
                    srv = start_server(self, directory=srv.dir, port=srv.port)
                    c.approve(run.run_id, pending_proposal(c.get_run(run.run_id)))
                if ch.run_id == run.run_id and ch.status == v1.RUN_STATUS_COMPLETED:
                    break
            self.assertEqual(w.after_cursor, changes[-1].cursor)
        cursors = [ch.cursor for ch in changes]
        self.assertEqual(cursors, sorted(set(cursors)))
        self.assertEqual(
            [ch.status for ch in changes],
            [v1.RUN_STATUS_RUNNING, v1.RUN_STATUS_NEEDS_APPROVAL, v1.RUN_STATUS_RUNNING, v1.RUN_STATUS_COMPLETED],
        )

        # A filter naming no status is refused, not retried.
        with self.assertRaises(InvalidArgumentError):
            for _ in c.watch_runs(statuses=[v1.RUN_STATUS_UNSPECIFIED]):
                self.fail("refused")

    def test_failover_to_second_server(self):
        """Failover: the first server of the list is dead, the second
        answers."""
        srv = start_server(self)
        dead = f"127.0.0.1:{free_port()}"
        c = self.client([dead, srv.address], backoff=Backoff(min=0.02, max=0.1))

        run = c.start_run(refund_contract()).run
        seen = []
        for ev in c.watch_run(run.run_id):
            seen.append(ev)
            if payload(ev) == "approval_requested":
                c.approve(run.run_id, pending_proposal(c.get_run(run.run_id)))
        self.assertEqual(c.get_run(run.run_id).status, v1.RUN_STATUS_COMPLETED)
        self.assertEqual([e.sequence for e in seen], list(range(1, len(seen) + 1)))
        # A watch that starts on the dead server moves on to the live one;
        # so does a comma-separated list.
        fresh = self.client(f"{dead},{srv.address}")
        self.assertEqual(fresh.servers, (dead, srv.address))
        self.assertEqual(len(list(fresh.watch_run(run.run_id))), len(seen))
        # A refusal from the live server is its answer, not a reason to fail over.
        with self.assertRaises(NotFoundError) as cm:
            c.get_run("run_nope")
        self.assertEqual(cm.exception.server, srv.address)

    def test_failover_all_dead(self):
        """Failover: every server of the list dead is Unavailable, for a call,
        a watch and retry()."""
        dead = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
        c = self.client(dead, backoff=Backoff(min=0.02, max=0.05, patience=0.3))
        with self.assertRaises(UnavailableError) as cm:
            c.get_run("run_x")
        self.assertIn(cm.exception.server, dead)
        with self.assertRaises(UnavailableError):
            for _ in c.watch_run("run_x"):
                self.fail("no server, no event")
        # retry() gives up the same way once its patience ran out ...
        calls = []

        def get():
            calls.append(1)
            return c.get_run("run_x")

        with self.assertRaises(UnavailableError):
            c.retry(get)
        self.assertGreater(len(calls), 1)
        # ... and does not retry what waiting does not fix.
        live = start_server(self)
        lc = self.client(live.address)
        calls.clear()

        def missing():
            calls.append(1)
            return lc.get_run("run_x")

        with self.assertRaises(NotFoundError):
            lc.retry(missing)
        self.assertEqual(len(calls), 1)

    def test_token_auth(self):
        """Token auth: the server's token is accepted; a wrong one, none, or a
        viewer's for a start is refused."""
        srv = start_server(self, args=["--tokens", tokens_file(temp_dir(self))])
        good = self.client(srv.address, token=TOKEN)
        wrong = self.client(srv.address, token="not-the-token")
        none = self.client(srv.address)
        viewer = self.client(srv.address, token=VIEWER_TOKEN)

        run = good.start_run(refund_contract()).run
        self.assertEqual(run.principal, "py-operator")
        self.assertEqual(viewer.get_run(run.run_id).run_id, run.run_id)
        # The raw stub carries the token too.
        self.assertEqual(good.runs.GetServerInfo(v1.GetServerInfoRequest()).caller.principal, "py-operator")

        with self.assertRaises(UnauthenticatedError):
            wrong.get_run(run.run_id)
        with self.assertRaises(UnauthenticatedError):
            none.get_run(run.run_id)
        with self.assertRaises(UnauthenticatedError):
            for _ in wrong.watch_run(run.run_id):
                self.fail("a refused watch yields nothing")
        with self.assertRaises(PermissionDeniedError):
            viewer.start_run(refund_contract())

        # The token never goes in plaintext to a host that is not loopback,
        # unless told to.
        with self.assertRaisesRegex(PlaintextTokenError, "plaintext"):
            connect("192.0.2.1:7233", token=TOKEN)
        connect("192.0.2.1:7233", token=TOKEN, insecure_token=True).close()

    def test_retry_info(self):
        """RESOURCE_EXHAUSTED with a RetryInfo is retried after the server's
        delay; within a short timeout it is raised with the delay."""
        # One call a burst, two a second: each call right after another
        # waits about half a second.
        srv = start_server(self, args=["--rate", "2", "--burst", "1"])
        c = self.client(srv.address)
        for i in range(3):
            with self.assertRaises(NotFoundError):
                c.get_run(f"run_nope{i}")

        with self.assertRaises(ResourceExhaustedError) as cm:
            c.get_run("run_nope", timeout=0.05)
        self.assertIsNotNone(cm.exception.retry_delay)
        self.assertGreater(cm.exception.retry_delay, 0)
        self.assertIn("rate limit", cm.exception.message)

    def test_mtls(self):
        """mTLS: a client certificate the server's CA signed is its principal;
        none is refused."""
        d = temp_dir(self)
        try:
            make_certs(d)
        except (OSError, subprocess.CalledProcessError) as e:
            self.skipTest(f"openssl could not make the test certificates: {e}")
        tokens = tokens_file(d, [{"id": "py-cert", "tenant": "py", "roles": ["operator"], "cert_cn": "py-client"}])
        p = lambda name: os.path.join(d, name)  # noqa: E731
        srv = start_server(
            self,
            args=[
                "--tokens",
                tokens,
                "--tls-cert",
                p("server.pem"),
                "--tls-key",
                p("server.key"),
                "--client-ca",
                p("ca.pem"),
            ],
        )
        c = self.client(srv.address, ca_file=p("ca.pem"), cert_file=p("client.pem"), key_file=p("client.key"))
        no_cert = self.client(srv.address, ca_file=p("ca.pem"), backoff=Backoff(patience=0.2))
        plain = self.client(srv.address)

        self.assertEqual(c.runs.GetServerInfo(v1.GetServerInfoRequest()).caller.principal, "py-cert")
        run = c.start_run(refund_contract()).run
        self.assertEqual(run.principal, "py-cert")

        # Without a certificate the server ends the TLS connection, which
        # gRPC reports as the server being unavailable (the alert,
        # "certificate required", goes to gRPC's log); retry() gives up on
        # it after its patience.
        with self.assertRaises(UnavailableError):
            no_cert.get_run(run.run_id)
        with self.assertRaises(UnavailableError):
            no_cert.retry(lambda: no_cert.get_run(run.run_id))
        # A plaintext client gets no answer from a TLS port.
        with self.assertRaises(UnavailableError):
            plain.get_run(run.run_id)
        # The server's certificate is verified: under another CA it is refused.
        other_ca = self.client(srv.address, ca_file=p("other-ca.pem"), cert_file=p("client.pem"), key_file=p("client.key"))
        with self.assertRaises(UnavailableError) as cm:
            other_ca.get_run(run.run_id)
        self.assertIn("certificate verify failed", cm.exception.message)


def make_certs(d: str) -> None:
    """Writes a CA, a server certificate for 127.0.0.1 and a client
    certificate (CN py-client) it signed, and another CA, into d."""

    def ssl(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    ssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=rein-py-test-ca")
    ssl("req", "-x509", *ec, "-keyout", "other-ca.key", "-out", "other-ca.pem", "-days", "1", "-subj", "/CN=rein-py-other-ca")
    for name, subj, ext in (
        ("server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
        ("client", "/CN=py-client", "extendedKeyUsage=clientAuth\n"),
    ):
        ssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subj)
        with open(os.path.join(d, f"{name}.ext"), "w") as f:
            f.write(ext)
        ssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "1", "-extfile", f"{name}.ext",
        )


if __name__ == "__main__":
    unittest.main()
