// enginebank's retry rules against a scripted stand-in for the gateway (no cluster needed):
// what is retried, with which key, and how many times.

import assert from "node:assert/strict";
import { createServer } from "node:http";
import { describe, test } from "node:test";
import { refusal } from "./support.js";
import { Client, deposit, get } from "enginebank";

const DONE = [200, [{ outcome: "done", output: { Account: { balance: 1, version: 2, flags: 0 } } }]];
const UNAVAILABLE = [503, { error: "unavailable", message: "no leader answered" }];
const QUEUE_FULL = [503, { error: "queue_full", message: "too many commands waiting" }];
const IN_FLIGHT = [409, { error: "idempotency_key_in_flight", message: "in flight" }];

/** A client of a server that answers each POST with the next of `answers` (a status and a JSON
 * body; a 503 with Retry-After 0), the list of [path, key] it saw, and a function that stops
 * it. */
async function gateway(answers, tries = 3) {
  const script = [...answers];
  const seen = [];
  const server = createServer((request, response) => {
    request.resume();
    request.on("end", () => {
      seen.push([request.url, request.headers["idempotency-key"]]);
      const [status, answer] = script.shift();
      const headers = { "Content-Type": "application/json" };
      if (status === 503) headers["Retry-After"] = "0";
      response.writeHead(status, headers).end(JSON.stringify(answer));
    });
  });
  await new Promise((listening) => server.listen(0, "127.0.0.1", listening));
  const client = new Client(`http://127.0.0.1:${server.address().port}`, { token: "t", tries });
  const stop = () => {
    server.closeAllConnections();
    return new Promise((closed) => server.close(closed));
  };
  return { client, seen, stop };
}

describe("enginebank's retries", () => {
  test("a keyed submit is retried after a 503 with the same key", async () => {
    const { client, seen, stop } = await gateway([UNAVAILABLE, UNAVAILABLE, DONE]);
    const outcomes = await client.submit([deposit({ id: 1, amount: 1 })], "order-1");
    await stop();
    assert.deepEqual(outcomes, DONE[1]);
    assert.deepEqual(seen, Array(3).fill(["/v1/commands", "order-1"]));
  });

  test("an unknown outcome without a key is thrown, not retried", async () => {
    const { client, seen, stop } = await gateway([UNAVAILABLE]);
    const error = await refusal(() => client.submit([deposit({ id: 1, amount: 1 })]));
    await stop();
    assert.deepEqual([error.status, error.code], [503, "unavailable"]);
    assert.equal(error.outcomeUnknown, true);
    assert.equal(seen.length, 1);
  });

  test("a full queue ran nothing, so is retried without a key", async () => {
    const { client, seen, stop } = await gateway([QUEUE_FULL, DONE]);
    const outcomes = await client.submit([deposit({ id: 1, amount: 1 })]);
    await stop();
    assert.equal(outcomes[0].outcome, "done");
    assert.deepEqual(seen, Array(2).fill(["/v1/commands", undefined]));
  });

  test("tries are bounded", async () => {
    const { client, seen, stop } = await gateway([UNAVAILABLE, UNAVAILABLE, UNAVAILABLE], 3);
    const error = await refusal(() => client.submit([deposit({ id: 1, amount: 1 })], "order-2"));
    await stop();
    assert.equal(error.code, "unavailable");
    assert.equal(seen.length, 3);
  });

  test("reads are retried", async () => {
    const { client, seen, stop } = await gateway([UNAVAILABLE, DONE]);
    const outcomes = await client.read([get({ id: 1 })]);
    await stop();
    assert.equal(outcomes[0].outcome, "done");
    assert.deepEqual(seen, Array(2).fill(["/v1/reads", undefined]));
  });

  test("a key in flight on the first try is thrown", async () => {
    const { client, seen, stop } = await gateway([IN_FLIGHT]);
    const error = await refusal(() => client.submit([deposit({ id: 1, amount: 1 })], "order-3"));
    await stop();
    assert.deepEqual([error.status, error.code], [409, "idempotency_key_in_flight"]);
    assert.equal(seen.length, 1);
  });

  test("no connection is unreachable", async () => {
    const { client, stop } = await gateway([]);
    await stop();
    const error = await refusal(() => client.submit([deposit({ id: 1, amount: 1 })]));
    assert.deepEqual([error.status, error.code], [0, "unreachable"]);
    assert.equal(error.outcomeUnknown, false);
  });

  test("a number past 2^53 is refused rather than sent rounded", () => {
    assert.throws(() => deposit({ id: 2 ** 53, amount: 1 }), RangeError);
    assert.throws(() => deposit({ id: 1, amount: -1 }), RangeError);
  });
});
