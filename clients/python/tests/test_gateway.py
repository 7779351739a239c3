"""enginebank against a real gateway: GATEWAY_URL (http://HOST:PORT) and GATEWAY_TOKEN_FILE
name it. Each test works on fresh random accounts, so the suite can run again on one cluster."""

import json
import os
import random
import unittest
import urllib.request

from enginebank import (
    Account,
    Audit,
    Audited,
    Client,
    Deposit,
    GatewayError,
    Get,
    Open,
    Outcome,
    Refusal,
    Transfer,
    Transferred,
    Withdraw,
)

# Where random account ids start: far above the ids a benchmark prefills (1 to a few million).
RANDOM_ID_MIN = 2**40


def gateway_from_environment():
    url = os.environ.get("GATEWAY_URL")
    token_file = os.environ.get("GATEWAY_TOKEN_FILE")
    if not url or not token_file:
        raise RuntimeError(
            "set GATEWAY_URL (http://HOST:PORT of a running `runner gateway`) and "
            "GATEWAY_TOKEN_FILE (its --token-file)"
        )
    return url, token_file


class GatewayTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.url, token_file = gateway_from_environment()
        cls.client = Client(cls.url, token_file=token_file)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def setUp(self):
        """Two fresh accounts: `a` holding 100, `b` holding nothing."""
        self.a = random.SystemRandom().randrange(RANDOM_ID_MIN, 2 * RANDOM_ID_MIN)
        self.b = self.a + 1
        opened = self.client.submit([Open(self.a, balance=100), Open(self.b)])
        self.assertEqual([o.outcome for o in opened], ["done", "done"], opened)

    def balances(self):
        read = self.client.read([Get(self.a), Get(self.b)])
        return [outcome.output.balance for outcome in read]

    def test_a_keyed_submit_and_its_retry_move_money_once(self):
        key = f"python-transfer-{self.a}"
        moved = self.client.submit([Transfer(self.a, self.b, 30)], key=key)
        self.assertEqual(moved, [Outcome("done", output=Transferred(70, 30))])
        # The answer was lost, say: the same commands again with the same key.
        again = self.client.submit([Transfer(self.a, self.b, 30)], key=key)
        self.assertEqual(again, moved)
        self.assertEqual(self.balances(), [70, 30])

    def test_a_key_reused_for_other_commands_is_refused(self):
        key = f"python-reused-{self.a}"
        self.client.submit([Transfer(self.a, self.b, 30)], key=key)
        with self.assertRaises(GatewayError) as refused:
            self.client.submit([Transfer(self.a, self.b, 31)], key=key)
        self.assertEqual((refused.exception.status, refused.exception.code),
                         (422, "idempotency_key_reused"))
        self.assertFalse(refused.exception.outcome_unknown)
        self.assertEqual(self.balances(), [70, 30])

    def test_a_refused_command_says_why_and_changes_nothing(self):
        outcomes = self.client.submit([
            Withdraw(self.a, 1000),
            Transfer(self.a, self.a, 1),
            Deposit(self.b, 5),
            Get(0),
        ])
        self.assertEqual(outcomes, [
            Outcome("failed", error=Refusal("InsufficientFunds", {"balance": 100, "amount": 1000})),
            Outcome("failed", error=Refusal("SameAccount")),
            Outcome("done", output=Account(balance=5, version=2, flags=0)),
            Outcome("failed", error=Refusal("InvalidId")),
        ])
        [missing] = self.client.read([Get(self.b + 1)])
        self.assertEqual(missing.error, Refusal("AccountNotFound", self.b + 1))
        self.assertEqual(self.balances(), [100, 5])

    def test_an_unknown_field_is_refused_naming_it(self):
        memo = {"Transfer": {"from": self.a, "to": self.b, "amount": 1, "memo": "rent"}}
        with self.assertRaises(GatewayError) as refused:
            self.client.submit([Transfer(self.a, self.b, 1), memo], key=f"python-memo-{self.a}")
        error = refused.exception
        self.assertEqual((error.status, error.code), (400, "bad_body"))
        self.assertEqual(error.path, "[1].Transfer.memo")
        self.assertIn("memo", error.message)
        self.assertIn("[1].Transfer.memo", str(error))
        self.assertEqual(self.balances(), [100, 0], "nothing of a refused body ran")

    def test_reads_are_answered_and_refuse_writes(self):
        [account, audit] = self.client.read([Get(self.a), Audit()])
        self.assertEqual(account.output, Account(balance=100, version=1, flags=0))
        self.assertIsInstance(audit.output, Audited)
        self.assertGreaterEqual(audit.output.accounts, 2)
        self.assertGreaterEqual(audit.output.total, 100)
        with self.assertRaises(GatewayError) as refused:
            self.client.read([Get(self.a), Deposit(self.a, 1)])
        self.assertEqual((refused.exception.status, refused.exception.code),
                         (400, "not_read_only"))

    def test_a_wrong_token_is_unauthorized(self):
        with Client(self.url, token="not the token") as stranger:
            with self.assertRaises(GatewayError) as refused:
                stranger.submit([Deposit(self.a, 1)])
        self.assertEqual((refused.exception.status, refused.exception.code),
                         (401, "unauthorized"))
        self.assertEqual(self.balances(), [100, 0])


class DocumentTest(unittest.TestCase):
    def test_the_typed_commands_are_the_gateways_commands(self):
        """Each command's variant and fields, as this package writes them, are the ones the
        gateway's OpenAPI document gives BankCommand (served without the token)."""
        url, _ = gateway_from_environment()
        with urllib.request.urlopen(url.rstrip("/") + "/v1/openapi.json", timeout=15) as answer:
            document = json.load(answer)
        described = command_fields(document["components"]["schemas"]["BankCommand"])
        ours = {}
        for command in [Open(1), Deposit(1, 1), Withdraw(1, 1), Transfer(1, 2, 1), Get(1),
                        Audit()]:
            written = command.to_json()
            if isinstance(written, str):
                ours[written] = None
            else:
                [(name, fields)] = written.items()
                ours[name] = sorted(fields)
        self.assertEqual(ours, described)


def command_fields(schema):
    """{variant: sorted field names, or None for a unit variant} from a JSON Schema of an
    externally tagged enum (a `oneOf` of string constants and one-key objects)."""
    variants = {}
    for variant in schema["oneOf"]:
        constants = variant.get("enum", [variant["const"]] if "const" in variant else [])
        for name in constants:
            variants[name] = None
        for name, body in variant.get("properties", {}).items():
            variants[name] = sorted(body.get("properties", {}))
    return variants


if __name__ == "__main__":
    unittest.main()
