#!/usr/bin/env python3
"""Calls the Bank through its HTTP gateway (`runner gateway`) with the standard library only.

    python3 bank.py http://127.0.0.1:8080 TOKEN_FILE [FIRST_ACCOUNT_ID]

Opens two accounts (from FIRST_ACCOUNT_ID, or fresh random ones, so that every run works on
accounts of its own), moves money between them with an idempotency key, retries that request
as a client would after a lost answer (the same key: the first answer again, nothing moves
twice), shows that the key cannot be reused for other commands, and reads the balances off
the log. Prints one JSON line of what it saw; exits 1 on any surprise.
The package in clients/python (`enginebank`) is the supported way to call the gateway.
"""

import http.client
import json
import random
import sys
import time
import urllib.parse

# Seconds to wait for one answer.
TIMEOUT_S = 30
# Tries of one request while the gateway answers 503 (no leader yet, busy): with the same
# idempotency key a retry is always safe.
TRIES_MAX = 20
# Where random account ids start, far above ids a benchmark prefills (1 to a few million).
RANDOM_ID_MIN = 2**40


class Gateway:
    """One keep-alive HTTP/1.1 connection to a gateway."""

    def __init__(self, url, token):
        parts = urllib.parse.urlsplit(url)
        self.connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=TIMEOUT_S)
        self.token = token

    def post(self, path, commands, key=None):
        """POSTs `commands`; returns (status, parsed JSON body). Retries a 503 after its
        Retry-After."""
        headers = {"Content-Type": "application/json", "Authorization": "Bearer " + self.token}
        if key is not None:
            headers["Idempotency-Key"] = key
        body = json.dumps(commands)
        for _ in range(TRIES_MAX):
            self.connection.request("POST", path, body=body, headers=headers)
            response = self.connection.getresponse()
            answer = json.loads(response.read() or b"null")
            if response.status != 503:
                return response.status, answer
            time.sleep(float(response.getheader("Retry-After", "1")))
        return response.status, answer

    def commands(self, commands, key=None):
        status, answer = self.post("/v1/commands", commands, key)
        expect(status == 200, f"commands answered {status}: {answer}")
        return answer

    def balance(self, account):
        status, answer = self.post("/v1/reads", [{"Get": {"id": account}}])
        expect(status == 200, f"read answered {status}: {answer}")
        return answer[0]["output"]["Account"]["balance"]


def expect(condition, what):
    if not condition:
        print(json.dumps({"ok": False, "failed": what}))
        sys.exit(1)


def main():
    url, token_file = sys.argv[1], sys.argv[2]
    if len(sys.argv) > 3:
        first = int(sys.argv[3])
    else:
        first = random.SystemRandom().randrange(RANDOM_ID_MIN, 2 * RANDOM_ID_MIN)
    with open(token_file, encoding="utf-8") as f:
        token = f.read().strip()
    gateway = Gateway(url, token)
    a, b = first, first + 1
    opened = gateway.commands([
        {"Open": {"id": a, "balance": 100, "flags": 0}},
        {"Open": {"id": b, "balance": 0, "flags": 0}},
    ])
    expect([o["outcome"] for o in opened] == ["done", "done"], f"opens: {opened}")

    transfer = [{"Transfer": {"from": a, "to": b, "amount": 30}}]
    key = f"python-transfer-{a}"
    moved = gateway.commands(transfer, key=key)
    # The answer was lost, say: the same request again, with the same key.
    again = gateway.commands(transfer, key=key)
    expect(again == moved, f"a retry got another answer: {moved} then {again}")

    other = [{"Transfer": {"from": a, "to": b, "amount": 31}}]
    status, refused = gateway.post("/v1/commands", other, key=key)
    expect(status == 422, f"a key reused for other commands answered {status}: {refused}")

    balances = [gateway.balance(a), gateway.balance(b)]
    expect(balances == [70, 30], f"balances {balances}, not [70, 30]: the transfer ran once")
    said = {"ok": True, "accounts": [a, b], "moved": moved, "balances": balances}
    print(json.dumps({**said, "reused_key": status}))


if __name__ == "__main__":
    main()
