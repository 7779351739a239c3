// A client of the Bank behind `runner gateway` (HTTP and JSON), with Node's own fetch (Node 18
// or later) and no packages.
//
//     import { Client, open, transfer, get } from "enginebank";
//     const client = new Client("http://127.0.0.1:8080", { tokenFile: "token" });
//     const [moved] = await client.submit([transfer({ from: 1, to: 2, amount: 30 })], "order-1");
//
// A command's outcome is a value (done with an output, or failed with the Bank's reason); a
// request the gateway did not answer with outcomes throws a GatewayError carrying the
// gateway's error code. `notes/decisions/gateway.md` in the engine's repository says what each
// answer means.

import { readFileSync } from "node:fs";

/** Seconds one request may take, answer included. Above the gateway's own limit
 * (GATEWAY_GIVE_UP_S, 10 s): a cluster that cannot answer is told by the gateway (503), not cut
 * off here. */
export const TIMEOUT_S = 15;
/** Tries of one call at most, the first included. */
export const TRIES_MAX = 6;
/** Seconds before the first retry, doubled before each next one up to BACKOFF_MAX_S (each wait
 * drawn between half of it and all of it, so that callers that failed together spread out); a
 * 503's Retry-After is waited at least. */
export const BACKOFF_FIRST_S = 0.2;
/** The longest wait between two tries, in seconds. */
export const BACKOFF_MAX_S = 3;

// The failures after which the commands may have run: a retry is safe with a key only.
const OUTCOME_UNKNOWN = ["unavailable", "stopped", "no_answer"];
// The failures after which nothing ran: a retry is always safe.
const NOTHING_RAN = ["queue_full", "unreachable"];
// What a failed connection says when nothing was sent.
const NOT_CONNECTED = ["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH"];

// The Bank's commands (bank/src/lib.rs, `BankCommand`), as the gateway takes them. Ids and
// amounts are u64 and flags u32; a JavaScript number is exact up to 2^53 - 1, so a larger one
// is refused here rather than sent rounded.

/** @typedef {import("./index.js").Command} Command */

/** Opens account `id` (nonzero); a nonzero `balance` counts as a first deposit.
 * @param {{id: number, balance?: number, flags?: number}} fields */
export function open({ id, balance = 0, flags = 0 }) {
  return {
    Open: { id: whole("id", id), balance: whole("balance", balance), flags: whole("flags", flags) },
  };
}

/** Adds `amount` (above zero) to account `id`.
 * @param {{id: number, amount: number}} fields */
export function deposit({ id, amount }) {
  return { Deposit: { id: whole("id", id), amount: whole("amount", amount) } };
}

/** Takes `amount` (above zero) from account `id`.
 * @param {{id: number, amount: number}} fields */
export function withdraw({ id, amount }) {
  return { Withdraw: { id: whole("id", id), amount: whole("amount", amount) } };
}

/** Moves `amount` (above zero) from account `from` to another account `to`.
 * @param {{from: number, to: number, amount: number}} fields */
export function transfer({ from, to, amount }) {
  return {
    Transfer: { from: whole("from", from), to: whole("to", to), amount: whole("amount", amount) },
  };
}

/** Reads account `id` (read-only: `Client.read` takes it).
 * @param {{id: number}} fields */
export function get({ id }) {
  return { Get: { id: whole("id", id) } };
}

/** Counts the accounts and sums their balances (read-only). */
export function audit() {
  return "Audit";
}

function whole(name, value) {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new RangeError(`${name} must be an integer from 0 to 2^53 - 1, not ${value}`);
  }
  return value;
}

/** A request answered without outcomes: none of its commands' results are known here.
 *
 * `status` is the HTTP status (0 when no answer came) and `code` the gateway's error code: 400
 * bad_body (with `path`, e.g. "[0].Transfer.memo"), command_count, not_read_only,
 * bad_idempotency_key; 401 unauthorized; 408 slow_body; 409 idempotency_key_in_flight; 410
 * idempotency_key_expired; 413 too_large; 422 idempotency_key_reused; 502 rejected, cluster,
 * no_randomness; 503 queue_full, unavailable, stopped. This client adds "unreachable" (no
 * connection: nothing was sent), "no_answer" (sent, no answer in time), "bad_answer" (a 200 that
 * is not outcomes) and "http_<status>" (an answer that is not the gateway's JSON). */
export class GatewayError extends Error {
  /** @param {number} status @param {string} code @param {string} message @param {string} [path] */
  constructor(status, code, message, path) {
    super(status ? `${status} ${code}: ${message}` : `${code}: ${message}`);
    this.name = "GatewayError";
    this.status = status;
    this.code = code;
    this.detail = message;
    this.path = path;
  }

  /** True when the commands may have run: only a retry with the same key finds out. */
  get outcomeUnknown() {
    return OUTCOME_UNKNOWN.includes(this.code);
  }
}

export class Client {
  /** Calls one gateway. `token` (or the first line of `tokenFile`) is sent as the bearer token.
   * @param {string} url
   * @param {{token?: string, tokenFile?: string, timeoutS?: number, tries?: number}} [options] */
  constructor(url, { token, tokenFile, timeoutS = TIMEOUT_S, tries = TRIES_MAX } = {}) {
    if (!/^https?:\/\/./.test(url)) throw new TypeError(`not an http or https URL: ${url}`);
    if (!(tries >= 1)) throw new RangeError("tries is at least 1");
    this.url = url.replace(/\/+$/, "");
    this.token = tokenFile === undefined ? token : readFileSync(tokenFile, "utf8").trim();
    this.timeoutS = timeoutS;
    this.tries = tries;
  }

  /** POST /v1/commands: the commands' outcomes, in order.
   *
   * With `key` (1 to 255 visible ASCII characters) the cluster runs them at most once: a retry
   * after a 503 or a lost connection reuses it and gets the first attempt's outcomes. Without
   * one only what surely did not run is retried (no connection, a full queue); an unknown
   * outcome throws a GatewayError (`outcomeUnknown`).
   * @param {Command[]} commands @param {string} [key] */
  submit(commands, key) {
    return this.#call("/v1/commands", commands, key, key !== undefined);
  }

  /** POST /v1/reads: read-only commands (get, audit), answered off the log (linearizable); they
   * change nothing, so every failure that may pass is retried.
   * @param {Command[]} commands */
  read(commands) {
    return this.#call("/v1/reads", commands, undefined, true);
  }

  async #call(path, commands, key, safe) {
    const body = JSON.stringify(commands);
    const headers = { "Content-Type": "application/json", Accept: "application/json" };
    if (this.token !== undefined) headers.Authorization = `Bearer ${this.token}`;
    if (key !== undefined) headers["Idempotency-Key"] = key;
    for (let attempt = 1; ; attempt++) {
      const { outcomes, failure, waitS } = await this.#attempt(path, body, headers);
      if (failure === undefined) return outcomes;
      if (attempt >= this.tries || !retryable(failure, safe, attempt)) throw failure;
      await new Promise((done) => setTimeout(done, Math.max(waitS, backoffS(attempt)) * 1000));
    }
  }

  /** One POST: its outcomes, or the failure and the seconds its Retry-After asks for. */
  async #attempt(path, body, headers) {
    let response;
    let text;
    try {
      const signal = AbortSignal.timeout(this.timeoutS * 1000);
      response = await fetch(this.url + path, { method: "POST", headers, body, signal });
      text = await response.text();
    } catch (error) {
      return { failure: noAnswer(error), waitS: 0 };
    }
    let answer;
    try {
      answer = JSON.parse(text);
    } catch {
      answer = undefined;
    }
    const status = response.status;
    if (status === 200 && Array.isArray(answer)) return { outcomes: answer };
    if (status === 200) {
      return { failure: new GatewayError(status, "bad_answer", text.slice(0, 200)), waitS: 0 };
    }
    const waitS = Math.max(0, Number(response.headers.get("Retry-After")) || 0);
    if (answer !== null && typeof answer === "object" && typeof answer.error === "string") {
      const message = String(answer.message ?? "");
      return { failure: new GatewayError(status, answer.error, message, answer.path), waitS };
    }
    return { failure: new GatewayError(status, `http_${status}`, text.slice(0, 200)), waitS };
  }
}

/** The failure of a fetch that got no answer: "unreachable" when it never connected. */
function noAnswer(error) {
  const cause = error?.cause;
  const codes = [cause?.code, ...(cause?.errors ?? []).map((e) => e?.code)];
  const reason = cause?.message || error?.message || String(error);
  if (codes.some((code) => NOT_CONNECTED.includes(code))) {
    return new GatewayError(0, "unreachable", `cannot connect (${reason}); nothing was sent`);
  }
  return new GatewayError(0, "no_answer", `no answer (${reason}); the outcome is unknown`);
}

/** Whether trying again cannot run the commands twice: after what ran nothing; after an unknown
 * outcome with a key (its retry is answered from the cluster) or on reads; after a 409 on a
 * retry, which is this call's own earlier attempt still running. */
function retryable(failure, safe, attempt) {
  if (NOTHING_RAN.includes(failure.code)) return true;
  if (failure.code === "idempotency_key_in_flight") return attempt > 1;
  return safe && failure.outcomeUnknown;
}

function backoffS(attempt) {
  const ceilingS = Math.min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (attempt - 1));
  return ceilingS / 2 + Math.random() * (ceilingS / 2);
}
