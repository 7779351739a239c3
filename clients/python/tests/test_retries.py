"""enginebank's retry rules against a scripted stand-in for the gateway (no cluster needed):
what is retried, with which key, and how many times."""

import http.server
import json
import socket
import threading
import unittest

from enginebank import Account, Client, Deposit, GatewayError, Get, Outcome

DONE = (200, [{"outcome": "done", "output": {"Account": {"balance": 1, "version": 2, "flags": 0}}}])
UNAVAILABLE = (503, {"error": "unavailable", "message": "no leader answered"})
QUEUE_FULL = (503, {"error": "queue_full", "message": "too many commands waiting"})
IN_FLIGHT = (409, {"error": "idempotency_key_in_flight", "message": "in flight"})


class RetryTest(unittest.TestCase):
    def gateway(self, *answers, tries=3):
        """A client of a server that answers each POST with the next of `answers` (a status
        and a JSON body; a 503 with Retry-After 0), and the list of (path, key) it saw."""
        script, seen = list(answers), []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                seen.append((self.path, self.headers.get("Idempotency-Key")))
                status, answer = script.pop(0)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 503:
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        client = Client(f"http://127.0.0.1:{server.server_port}", token="t", tries=tries)
        self.addCleanup(client.close)
        return client, seen

    def test_a_keyed_submit_is_retried_after_a_503_with_the_same_key(self):
        client, seen = self.gateway(UNAVAILABLE, UNAVAILABLE, DONE)
        outcomes = client.submit([Deposit(1, 1)], key="order-1")
        self.assertEqual(outcomes, [Outcome("done", output=Account(1, 2, 0))])
        self.assertEqual(seen, [("/v1/commands", "order-1")] * 3)

    def test_an_unknown_outcome_without_a_key_is_raised_not_retried(self):
        client, seen = self.gateway(UNAVAILABLE)
        with self.assertRaises(GatewayError) as failed:
            client.submit([Deposit(1, 1)])
        self.assertEqual((failed.exception.status, failed.exception.code), (503, "unavailable"))
        self.assertTrue(failed.exception.outcome_unknown)
        self.assertEqual(len(seen), 1)

    def test_a_full_queue_ran_nothing_so_is_retried_without_a_key(self):
        client, seen = self.gateway(QUEUE_FULL, DONE)
        self.assertTrue(client.submit([Deposit(1, 1)])[0].done)
        self.assertEqual(seen, [("/v1/commands", None)] * 2)

    def test_tries_are_bounded(self):
        client, seen = self.gateway(UNAVAILABLE, UNAVAILABLE, UNAVAILABLE, tries=3)
        with self.assertRaises(GatewayError) as failed:
            client.submit([Deposit(1, 1)], key="order-2")
        self.assertEqual(failed.exception.code, "unavailable")
        self.assertEqual(len(seen), 3)

    def test_reads_are_retried(self):
        client, seen = self.gateway(UNAVAILABLE, DONE)
        self.assertTrue(client.read([Get(1)])[0].done)
        self.assertEqual(seen, [("/v1/reads", None)] * 2)

    def test_a_key_in_flight_on_the_first_try_is_raised(self):
        client, seen = self.gateway(IN_FLIGHT)
        with self.assertRaises(GatewayError) as failed:
            client.submit([Deposit(1, 1)], key="order-3")
        self.assertEqual((failed.exception.status, failed.exception.code),
                         (409, "idempotency_key_in_flight"))
        self.assertEqual(len(seen), 1)

    def test_no_connection_is_unreachable(self):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        with Client(f"http://127.0.0.1:{port}", tries=2) as client:
            with self.assertRaises(GatewayError) as failed:
                client.submit([Deposit(1, 1)])
        self.assertEqual((failed.exception.status, failed.exception.code), (0, "unreachable"))
        self.assertFalse(failed.exception.outcome_unknown)


if __name__ == "__main__":
    unittest.main()
