"""watch_run(model_output=True): the model's text as it is written, between
the events, against a real rein serve whose scripted model streams its first
reply in chunks; beside its twin, a watch that did not ask and gets events
only."""

from __future__ import annotations

import unittest

from helpers import payload, refund_contract, start_server, status_to

from rein_client import connect, pending_proposal, v1

# The first reply's streamed text: three chunks, 300 ms apart.
CHUNKS = ["Looking up ", "invoice ", "INV-42."]


def streaming_contract() -> v1.TaskContract:
    """The refund task whose first model call writes CHUNKS as it goes."""

    def change(task, script):
        script[0]["chunks"] = [{"text": t, "delay_ms": 300} for t in CHUNKS]

    return refund_contract(change)


def stored_events(c, run_id):
    return list(c.runs.ListEvents(v1.ListEventsRequest(run_id=run_id, page_size=10000)).events)


class ModelOutputTest(unittest.TestCase):
    def client(self, srv):
        c = connect(srv.address)
        self.addCleanup(c.close)
        return c

    def watch_to_end(self, c, run_id, **kw):
        """Everything the watch yields until the run completes, approving its
        proposal on the way; and the watch."""
        items = []
        w = c.watch_run(run_id, **kw)
        with w:
            for it in w:
                items.append(it)
                if isinstance(it, v1.Event) and status_to(it) == v1.RUN_STATUS_NEEDS_APPROVAL:
                    c.approve(run_id, pending_proposal(c.get_run(run_id)), reason="duplicate charge")
        self.assertEqual(c.get_run(run_id).status, v1.RUN_STATUS_COMPLETED)
        return items, w

    def test_model_output_between_events(self):
        """With model_output the watch yields the first call's text as the
        model writes it, whole and done before the call's model_returned,
        between exactly the stored events; the cursor is the last event's."""
        srv = start_server(self)
        c = self.client(srv)
        run = c.start_run(streaming_contract()).run

        items, w = self.watch_to_end(c, run.run_id, model_output=True)
        for it in items:
            self.assertIsInstance(it, (v1.Event, v1.ModelOutput))
        events = [it for it in items if isinstance(it, v1.Event)]
        outputs = [it for it in items if isinstance(it, v1.ModelOutput)]

        # The events are exactly the stored log, and the cursor the last one.
        stored = stored_events(c, run.run_id)
        self.assertEqual([e.SerializeToString(deterministic=True) for e in events],
                         [e.SerializeToString(deterministic=True) for e in stored])
        self.assertEqual([e.sequence for e in events], list(range(1, len(events) + 1)))
        self.assertEqual(w.after, stored[-1].sequence)

        # The first model call's text, rebuilt from its offsets, is its chunks.
        first = next(e for e in events if payload(e) == "model_requested")
        mine = [o for o in outputs if o.requested == first.sequence]
        self.assertGreaterEqual(len(mine), 2, f"the call's text came in one piece: {mine}")
        text = b""
        for o in mine:
            self.assertEqual((o.step, o.attempt), (1, 1))
            if o.offset == 0:
                text = b""  # a call sent again from its start
            self.assertEqual(o.offset, len(text), "a piece of the text skipped or repeated")
            text += o.text.encode()
        self.assertEqual(text.decode(), "".join(CHUNKS))
        self.assertTrue(mine[-1].done, "the call's last output is not done")
        self.assertFalse(any(o.done for o in mine[:-1]), "output after done")

        # ... all of it, done, before the call's model_returned event.
        returned = next(e for e in events if payload(e) == "model_returned" and e.sequence > first.sequence)
        at = {id(it): i for i, it in enumerate(items)}
        self.assertLess(at[id(mine[-1])], at[id(returned)])
        self.assertLess(at[id(first)], at[id(mine[0])])

    def test_without_model_output_events_only(self):
        """Its twin: the same run watched without model_output yields the
        events only, the same as the stored log."""
        srv = start_server(self)
        c = self.client(srv)
        run = c.start_run(streaming_contract()).run

        items, w = self.watch_to_end(c, run.run_id)
        for it in items:
            self.assertIsInstance(it, v1.Event)
        self.assertFalse(w.model_output)
        stored = stored_events(c, run.run_id)
        self.assertEqual([e.SerializeToString(deterministic=True) for e in items],
                         [e.SerializeToString(deterministic=True) for e in stored])
        self.assertEqual(w.after, stored[-1].sequence)


if __name__ == "__main__":
    unittest.main()
