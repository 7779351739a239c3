// Calls the Bank through its HTTP gateway (`runner gateway`) with Node's own fetch (Node 18
// or later), no packages.
//
//     node bank.mjs http://127.0.0.1:8080 TOKEN_FILE [FIRST_ACCOUNT_ID]
//
// Opens two accounts (from FIRST_ACCOUNT_ID, or fresh random ones, so that every run works
// on accounts of its own), moves money between them with an idempotency key, retries that request
// as a client would after a lost answer (the same key: the first answer again, nothing moves
// twice), shows that the key cannot be reused for other commands, and reads the balances off
// the log. Prints one JSON line of what it saw; exits 1 on any surprise.
// The package in clients/node (`enginebank`) is the supported way to call the gateway.

import { readFileSync } from "node:fs";

// Tries of one request while the gateway answers 503 (no leader yet, busy): with the same
// idempotency key a retry is always safe.
const TRIES_MAX = 20;
// Where random account ids start, far above ids a benchmark prefills (1 to a few million),
// and below 2^53, where a JavaScript number stops being exact.
const RANDOM_ID_MIN = 2 ** 40;

function expect(condition, what) {
  if (!condition) {
    console.log(JSON.stringify({ ok: false, failed: what }));
    process.exit(1);
  }
}

class Gateway {
  constructor(url, token) {
    this.url = url;
    this.token = token;
  }

  // POSTs `commands`; returns [status, parsed body]. Retries a 503 after its Retry-After.
  async post(path, commands, key) {
    const headers = {
      "Content-Type": "application/json",
      Authorization: `Bearer ${this.token}`,
    };
    if (key !== undefined) headers["Idempotency-Key"] = key;
    let response;
    let answer;
    for (let tries = 0; tries < TRIES_MAX; tries++) {
      response = await fetch(this.url + path, {
        method: "POST",
        headers,
        body: JSON.stringify(commands),
      });
      answer = await response.json();
      if (response.status !== 503) break;
      const wait = Number(response.headers.get("Retry-After") ?? "1");
      await new Promise((done) => setTimeout(done, wait * 1000));
    }
    return [response.status, answer];
  }

  async commands(commands, key) {
    const [status, answer] = await this.post("/v1/commands", commands, key);
    expect(status === 200, `commands answered ${status}: ${JSON.stringify(answer)}`);
    return answer;
  }

  async balance(account) {
    const [status, answer] = await this.post("/v1/reads", [{ Get: { id: account } }]);
    expect(status === 200, `read answered ${status}: ${JSON.stringify(answer)}`);
    return answer[0].output.Account.balance;
  }
}

const [url, tokenFile, firstArg] = process.argv.slice(2);
const first =
  firstArg === undefined
    ? RANDOM_ID_MIN + Math.floor(Math.random() * RANDOM_ID_MIN)
    : Number(firstArg);
const gateway = new Gateway(url, readFileSync(tokenFile, "utf8").trim());
const [a, b] = [first, first + 1];

const opened = await gateway.commands([
  { Open: { id: a, balance: 100, flags: 0 } },
  { Open: { id: b, balance: 0, flags: 0 } },
]);
expect(
  opened.every((o) => o.outcome === "done"),
  `opens: ${JSON.stringify(opened)}`,
);

const transfer = [{ Transfer: { from: a, to: b, amount: 30 } }];
const key = `node-transfer-${a}`;
const moved = await gateway.commands(transfer, key);
// The answer was lost, say: the same request again, with the same key.
const again = await gateway.commands(transfer, key);
expect(
  JSON.stringify(again) === JSON.stringify(moved),
  `a retry got another answer: ${JSON.stringify(moved)} then ${JSON.stringify(again)}`,
);

const other = [{ Transfer: { from: a, to: b, amount: 31 } }];
const [status, refused] = await gateway.post("/v1/commands", other, key);
expect(status === 422, `a key reused for other commands answered ${status}: ${JSON.stringify(refused)}`);

const balances = [await gateway.balance(a), await gateway.balance(b)];
expect(
  balances[0] === 70 && balances[1] === 30,
  `balances ${balances}, not [70, 30]: the transfer ran once`,
);
console.log(JSON.stringify({ ok: true, accounts: [a, b], moved, balances, reused_key: status }));
