// enginebank against a real gateway: GATEWAY_URL (http://HOST:PORT) and GATEWAY_TOKEN_FILE name
// it. Each test works on fresh random accounts, so the suite can run again on one cluster.

import assert from "node:assert/strict";
import { randomInt } from "node:crypto";
import { describe, test } from "node:test";
import { refusal } from "./support.js";
import {
  Client,
  audit,
  deposit,
  get,
  open,
  transfer,
  withdraw,
} from "enginebank";

// Where random account ids start: far above the ids a benchmark prefills (1 to a few million),
// and below 2^53, where a JavaScript number stops being exact.
const RANDOM_ID_MIN = 2 ** 40;

const url = process.env.GATEWAY_URL;
const tokenFile = process.env.GATEWAY_TOKEN_FILE;
if (!url || !tokenFile) {
  throw new Error(
    "set GATEWAY_URL (http://HOST:PORT of a running `runner gateway`) and " +
      "GATEWAY_TOKEN_FILE (its --token-file)",
  );
}
const client = new Client(url, { tokenFile });

/** Two fresh accounts: `a` holding 100, `b` holding nothing. */
async function accounts() {
  const a = RANDOM_ID_MIN + randomInt(2 ** 40);
  const b = a + 1;
  const opened = await client.submit([open({ id: a, balance: 100 }), open({ id: b })]);
  assert.deepEqual(opened.map((o) => o.outcome), ["done", "done"], JSON.stringify(opened));
  return [a, b];
}

async function balances(a, b) {
  const read = await client.read([get({ id: a }), get({ id: b })]);
  return read.map((o) => o.output.Account.balance);
}

describe("enginebank against a real gateway", () => {
  test("a keyed submit and its retry move money once", async () => {
    const [a, b] = await accounts();
    const key = `node-transfer-${a}`;
    const moved = await client.submit([transfer({ from: a, to: b, amount: 30 })], key);
    assert.deepEqual(moved, [
      { outcome: "done", output: { Transferred: { from_balance: 70, to_balance: 30 } } },
    ]);
    // The answer was lost, say: the same commands again with the same key.
    const again = await client.submit([transfer({ from: a, to: b, amount: 30 })], key);
    assert.deepEqual(again, moved);
    assert.deepEqual(await balances(a, b), [70, 30]);
  });

  test("a key reused for other commands is refused", async () => {
    const [a, b] = await accounts();
    const key = `node-reused-${a}`;
    await client.submit([transfer({ from: a, to: b, amount: 30 })], key);
    const error = await refusal(() =>
      client.submit([transfer({ from: a, to: b, amount: 31 })], key),
    );
    assert.deepEqual([error.status, error.code], [422, "idempotency_key_reused"]);
    assert.equal(error.outcomeUnknown, false);
    assert.deepEqual(await balances(a, b), [70, 30]);
  });

  test("a refused command says why and changes nothing", async () => {
    const [a, b] = await accounts();
    const outcomes = await client.submit([
      withdraw({ id: a, amount: 1000 }),
      transfer({ from: a, to: a, amount: 1 }),
      deposit({ id: b, amount: 5 }),
      get({ id: 0 }),
    ]);
    assert.deepEqual(outcomes, [
      { outcome: "failed", error: { InsufficientFunds: { balance: 100, amount: 1000 } } },
      { outcome: "failed", error: "SameAccount" },
      { outcome: "done", output: { Account: { balance: 5, version: 2, flags: 0 } } },
      { outcome: "failed", error: "InvalidId" },
    ]);
    const [missing] = await client.read([get({ id: b + 1 })]);
    assert.deepEqual(missing, { outcome: "failed", error: { AccountNotFound: b + 1 } });
    assert.deepEqual(await balances(a, b), [100, 5]);
  });

  test("an unknown field is refused, naming it", async () => {
    const [a, b] = await accounts();
    const memo = { Transfer: { from: a, to: b, amount: 1, memo: "rent" } };
    const error = await refusal(() =>
      client.submit([transfer({ from: a, to: b, amount: 1 }), memo], `node-memo-${a}`),
    );
    assert.deepEqual([error.status, error.code], [400, "bad_body"]);
    assert.equal(error.path, "[1].Transfer.memo");
    assert.match(error.detail, /memo/);
    assert.match(error.message, /\[1\]\.Transfer\.memo/);
    assert.deepEqual(await balances(a, b), [100, 0], "nothing of a refused body ran");
  });

  test("reads are answered and refuse writes", async () => {
    const [a] = await accounts();
    const [account, totals] = await client.read([get({ id: a }), audit()]);
    assert.deepEqual(account, {
      outcome: "done",
      output: { Account: { balance: 100, version: 1, flags: 0 } },
    });
    assert.ok(totals.output.Audit.accounts >= 2);
    assert.ok(BigInt(totals.output.Audit.total) >= 100n, "a u128 comes as its digits");
    const error = await refusal(() => client.read([get({ id: a }), deposit({ id: a, amount: 1 })]));
    assert.deepEqual([error.status, error.code], [400, "not_read_only"]);
  });

  test("a wrong token is unauthorized", async () => {
    const [a, b] = await accounts();
    const stranger = new Client(url, { token: "not the token" });
    const error = await refusal(() => stranger.submit([deposit({ id: a, amount: 1 })]));
    assert.deepEqual([error.status, error.code], [401, "unauthorized"]);
    assert.deepEqual(await balances(a, b), [100, 0]);
  });

  test("the commands are the gateway's commands", async () => {
    // Each command's variant and fields, as this package writes them, are the ones the
    // gateway's OpenAPI document gives BankCommand (served without the token).
    const response = await fetch(`${url.replace(/\/+$/, "")}/v1/openapi.json`);
    const document = await response.json();
    const described = commandFields(document.components.schemas.BankCommand);
    const ours = {};
    const samples = [
      open({ id: 1 }),
      deposit({ id: 1, amount: 1 }),
      withdraw({ id: 1, amount: 1 }),
      transfer({ from: 1, to: 2, amount: 1 }),
      get({ id: 1 }),
      audit(),
    ];
    for (const written of samples) {
      if (typeof written === "string") {
        ours[written] = null;
      } else {
        const [[name, fields]] = Object.entries(written);
        ours[name] = Object.keys(fields).sort();
      }
    }
    assert.deepEqual(ours, described);
  });
});

/** {variant: sorted field names, or null for a unit variant} from a JSON Schema of an
 * externally tagged enum (a `oneOf` of string constants and one-key objects). */
function commandFields(schema) {
  const variants = {};
  for (const variant of schema.oneOf) {
    const constants = variant.enum ?? ("const" in variant ? [variant.const] : []);
    for (const name of constants) variants[name] = null;
    for (const [name, body] of Object.entries(variant.properties ?? {})) {
      variants[name] = Object.keys(body.properties ?? {}).sort();
    }
  }
  return variants;
}
