// Types of enginebank (index.js): the Bank's commands, outcomes and errors as the gateway
// writes them (bank/src/lib.rs; GET /v1/openapi.json describes the same shapes).

/** A Bank command as the gateway takes it. Ids and amounts are u64, flags u32. */
export type Command =
  | { Open: { id: number; balance: number; flags: number } }
  | { Deposit: { id: number; amount: number } }
  | { Withdraw: { id: number; amount: number } }
  | { Transfer: { from: number; to: number; amount: number } }
  | { Get: { id: number } }
  | "Audit";

export interface Account {
  balance: number;
  /** 1 when opened; every change adds one. */
  version: number;
  flags: number;
}

/** What a command that ran returns. An audit's `total` is a u128: its digits, as a string. */
export type Output =
  | { Account: Account }
  | { Transferred: { from_balance: number; to_balance: number } }
  | { Audit: { accounts: number; total: string } };

/** Why the Bank refused a command, which changed nothing. */
export type BankError =
  | "InvalidId"
  | { AccountNotFound: number }
  | { AccountExists: number }
  | "SameAccount"
  | { InsufficientFunds: { balance: number; amount: number } }
  | "ZeroAmount"
  | "Overflow"
  | "CapacityExhausted";

/** One command's outcome, in the order of the commands. */
export type Outcome =
  | { outcome: "done"; output: Output }
  | { outcome: "failed"; error: BankError }
  | { outcome: "invalid" };

/** The gateway's error codes (with their statuses), then this client's own (status 0). */
export type ErrorCode =
  | "bad_body" // 400, with `path`
  | "command_count" // 400
  | "not_read_only" // 400
  | "bad_idempotency_key" // 400
  | "unauthorized" // 401
  | "slow_body" // 408
  | "idempotency_key_in_flight" // 409
  | "idempotency_key_expired" // 410
  | "too_large" // 413
  | "idempotency_key_reused" // 422
  | "rejected" // 502
  | "cluster" // 502
  | "no_randomness" // 502
  | "queue_full" // 503: nothing ran
  | "unavailable" // 503: the outcome is unknown
  | "stopped" // 503: the outcome is unknown
  | "unreachable" // no connection: nothing was sent
  | "no_answer" // sent, no answer in time: the outcome is unknown
  | "bad_answer" // a 200 that is not outcomes
  | `http_${number}`; // an answer that is not the gateway's JSON

export const TIMEOUT_S: number;
export const TRIES_MAX: number;
export const BACKOFF_FIRST_S: number;
export const BACKOFF_MAX_S: number;

export function open(fields: { id: number; balance?: number; flags?: number }): Command;
export function deposit(fields: { id: number; amount: number }): Command;
export function withdraw(fields: { id: number; amount: number }): Command;
export function transfer(fields: { from: number; to: number; amount: number }): Command;
export function get(fields: { id: number }): Command;
export function audit(): Command;

/** A request answered without outcomes. `message` is "STATUS CODE: TEXT"; `detail` the
 * gateway's TEXT alone. */
export class GatewayError extends Error {
  constructor(status: number, code: string, message: string, path?: string);
  /** The HTTP status; 0 when no answer came. */
  readonly status: number;
  readonly code: ErrorCode;
  readonly detail: string;
  /** Where in the body (`[0].Transfer.memo`), for a bad_body. */
  readonly path?: string;
  /** True when the commands may have run: only a retry with the same key finds out. */
  readonly outcomeUnknown: boolean;
}

export interface ClientOptions {
  /** The bearer token. */
  token?: string;
  /** A file whose first line is the bearer token. */
  tokenFile?: string;
  /** Seconds one request may take (TIMEOUT_S). */
  timeoutS?: number;
  /** Tries of one call at most (TRIES_MAX). */
  tries?: number;
}

export class Client {
  constructor(url: string, options?: ClientOptions);
  /** POST /v1/commands; with `key` (Idempotency-Key) run at most once, retries reuse it. */
  submit(commands: Command[], key?: string): Promise<Outcome[]>;
  /** POST /v1/reads: read-only commands (get, audit). */
  read(commands: Command[]): Promise<Outcome[]>;
}
