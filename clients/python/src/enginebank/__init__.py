"""A client of the Bank behind `runner gateway` (HTTP and JSON), with the standard library only.

    from enginebank import Client, Open, Transfer, Get
    client = Client("http://127.0.0.1:8080", token_file="token")
    client.submit([Open(1, balance=100), Open(2)])
    [moved] = client.submit([Transfer(1, 2, 30)], key="order-1")   # once per key
    [read] = client.read([Get(1)])                                 # read.output.balance == 70

A command's outcome is a value (`Outcome`: done with an output, or failed with the Bank's
reason); a request the gateway did not answer with outcomes raises `GatewayError`, carrying
the gateway's error code. `notes/decisions/gateway.md` in the engine's repository says what
each answer means.
"""

from __future__ import annotations

import http.client
import json
import random
import ssl
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

__all__ = [
    "Account",
    "Audit",
    "Audited",
    "Client",
    "Command",
    "Deposit",
    "GatewayError",
    "Get",
    "Open",
    "Outcome",
    "Refusal",
    "Transfer",
    "Transferred",
    "Withdraw",
]

# Seconds to connect, and seconds each read of the answer may wait. Above the gateway's own
# limit (GATEWAY_GIVE_UP_S, 10 s): a cluster that cannot answer is told by the gateway (503),
# not cut off here.
TIMEOUT_S = 15.0
# Tries of one call at most, the first included.
TRIES_MAX = 6
# Seconds before the first retry, doubled before each next one up to BACKOFF_MAX_S (each wait
# drawn between half of it and all of it, so that callers that failed together spread out); a
# 503's Retry-After is waited at least.
BACKOFF_FIRST_S = 0.2
BACKOFF_MAX_S = 3.0
# Seconds a kept connection may sit unused and still be used: below the gateway's
# GATEWAY_HEADER_READ_S (10 s), after which it may close it. A request sent on a connection the
# gateway closed has an unknown fate, so a stale one is replaced before it is used.
IDLE_REUSE_S = 5.0

# The failures after which the commands may have run: a retry is safe with a key only.
_OUTCOME_UNKNOWN = ("unavailable", "stopped", "no_answer")
# The failures after which nothing ran: a retry is always safe.
_NOTHING_RAN = ("queue_full", "unreachable")


# The Bank's commands (bank/src/lib.rs, `BankCommand`). Ids and amounts are u64, flags u32.


@dataclass(frozen=True)
class Open:
    """Opens account `id` (nonzero); a nonzero `balance` counts as a first deposit."""

    id: int
    balance: int = 0
    flags: int = 0

    def to_json(self) -> Any:
        return {"Open": {"id": self.id, "balance": self.balance, "flags": self.flags}}


@dataclass(frozen=True)
class Deposit:
    """Adds `amount` (above zero) to account `id`."""

    id: int
    amount: int

    def to_json(self) -> Any:
        return {"Deposit": {"id": self.id, "amount": self.amount}}


@dataclass(frozen=True)
class Withdraw:
    """Takes `amount` (above zero) from account `id`."""

    id: int
    amount: int

    def to_json(self) -> Any:
        return {"Withdraw": {"id": self.id, "amount": self.amount}}


@dataclass(frozen=True)
class Transfer:
    """Moves `amount` (above zero) from account `from_` to another account `to`."""

    from_: int
    to: int
    amount: int

    def to_json(self) -> Any:
        return {"Transfer": {"from": self.from_, "to": self.to, "amount": self.amount}}


@dataclass(frozen=True)
class Get:
    """Reads account `id` (read-only: `Client.read` takes it)."""

    id: int

    def to_json(self) -> Any:
        return {"Get": {"id": self.id}}


@dataclass(frozen=True)
class Audit:
    """Counts the accounts and sums their balances (read-only)."""

    def to_json(self) -> Any:
        return "Audit"


Command = Union[Open, Deposit, Withdraw, Transfer, Get, Audit]


# What a command that ran returns (`BankOutput`) or why it was refused (`BankError`).


@dataclass(frozen=True)
class Account:
    """An account after an open, deposit or withdrawal, or as a get read it."""

    balance: int
    version: int
    flags: int


@dataclass(frozen=True)
class Transferred:
    """Both balances after a transfer."""

    from_balance: int
    to_balance: int


@dataclass(frozen=True)
class Audited:
    """An audit's figures (`total` is a u128: the gateway sends its digits as a string)."""

    accounts: int
    total: int


@dataclass(frozen=True)
class Refusal:
    """Why the Bank refused a command, which changed nothing: `reason` names the `BankError`
    (InvalidId, AccountNotFound, AccountExists, SameAccount, InsufficientFunds, ZeroAmount,
    Overflow, CapacityExhausted), `detail` is what it carries (an account id, a dict of
    `balance` and `amount`) or None."""

    reason: str
    detail: Any = None


@dataclass(frozen=True)
class Outcome:
    """One command's outcome: `outcome` is "done" (with `output`), "failed" (with `error`) or
    "invalid" (the handler's version cannot run it)."""

    outcome: str
    output: Any = None  # Account, Transferred or Audited (a variant unknown here: its JSON)
    error: Optional[Refusal] = None

    @property
    def done(self) -> bool:
        return self.outcome == "done"


class GatewayError(Exception):
    """A request answered without outcomes: none of its commands' results are known here.

    `status` is the HTTP status (0 when no answer came) and `code` the gateway's error code:
    400 bad_body (with `path`, e.g. "[0].Transfer.memo"), command_count, not_read_only,
    bad_idempotency_key; 401 unauthorized; 408 slow_body; 409 idempotency_key_in_flight;
    410 idempotency_key_expired; 413 too_large; 422 idempotency_key_reused; 502 rejected,
    cluster, no_randomness; 503 queue_full, unavailable, stopped. This client adds
    "unreachable" (no connection: nothing was sent), "no_answer" (sent, no answer in time),
    "bad_answer" (a 200 that is not outcomes) and "http_<status>" (an answer that is not the
    gateway's JSON, e.g. a proxy's).
    """

    def __init__(self, status: int, code: str, message: str, path: Optional[str] = None):
        super().__init__(f"{status} {code}: {message}" if status else f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.path = path

    @property
    def outcome_unknown(self) -> bool:
        """True when the commands may have run: only a retry with the same key finds out."""
        return self.code in _OUTCOME_UNKNOWN


class Client:
    """Calls one gateway over one kept connection: not for sharing between threads (make one
    per thread). `token` (or the first line of `token_file`) is sent as the bearer token;
    `ssl_context` is used for an https URL."""

    def __init__(
        self,
        url: str,
        token: Optional[str] = None,
        *,
        token_file: Optional[str] = None,
        timeout_s: float = TIMEOUT_S,
        tries: int = TRIES_MAX,
        ssl_context: Optional[ssl.SSLContext] = None,
    ):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http or https URL: {url!r}")
        if tries < 1:
            raise ValueError("tries is at least 1")
        if token_file is not None:
            with open(token_file, encoding="utf-8") as file:
                token = file.read().strip()
        self._scheme, self._host, self._port = parts.scheme, parts.hostname, parts.port
        self._base = parts.path.rstrip("/")
        self._token = token
        self._timeout_s = timeout_s
        self._tries = tries
        self._ssl_context = ssl_context
        self._connection: Optional[http.client.HTTPConnection] = None
        self._used_at = 0.0

    def submit(self, commands: Sequence[Any], key: Optional[str] = None) -> List[Outcome]:
        """POST /v1/commands: the commands' outcomes, in order.

        With `key` (1 to 255 visible ASCII characters) the cluster runs them at most once:
        a retry after a 503 or a lost connection reuses it and gets the first attempt's
        outcomes. Without one only what surely did not run is retried (no connection, a full
        queue); an unknown outcome raises GatewayError (`outcome_unknown`)."""
        return self._call("/v1/commands", commands, key, safe=key is not None)

    def read(self, commands: Sequence[Any]) -> List[Outcome]:
        """POST /v1/reads: read-only commands (Get, Audit), answered off the log
        (linearizable); they change nothing, so every failure that may pass is retried."""
        return self._call("/v1/reads", commands, None, safe=True)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(
        self, path: str, commands: Sequence[Any], key: Optional[str], safe: bool
    ) -> List[Outcome]:
        """Up to `tries` attempts, each retry only when `_retryable` says it is safe."""
        body = json.dumps([_command_json(command) for command in commands]).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._token is not None:
            headers["Authorization"] = "Bearer " + self._token
        if key is not None:
            headers["Idempotency-Key"] = key
        attempt = 1
        while True:
            outcomes, failure, wait_s = self._attempt(path, body, headers)
            if failure is None:
                return outcomes
            if attempt >= self._tries or not _retryable(failure, safe, attempt):
                raise failure
            time.sleep(max(wait_s, _backoff_s(attempt)))
            attempt += 1

    def _attempt(
        self, path: str, body: bytes, headers: Dict[str, str]
    ) -> Tuple[List[Outcome], Optional[GatewayError], float]:
        """One POST: its outcomes, or the failure and the seconds its Retry-After asks for."""
        try:
            status, retry_after, text = self._exchange(path, body, headers)
        except GatewayError as failure:
            return [], failure, 0.0
        try:
            answer = json.loads(text)
        except ValueError:
            answer = None
        if status == 200 and isinstance(answer, list):
            return [_outcome(value) for value in answer], None, 0.0
        if status == 200:
            return [], GatewayError(status, "bad_answer", text[:200]), 0.0
        if isinstance(answer, dict) and isinstance(answer.get("error"), str):
            failure = GatewayError(
                status, answer["error"], str(answer.get("message", "")), answer.get("path")
            )
        else:
            failure = GatewayError(status, f"http_{status}", text[:200])
        return [], failure, _seconds(retry_after)

    def _exchange(
        self, path: str, body: bytes, headers: Dict[str, str]
    ) -> Tuple[int, Optional[str], str]:
        """Status, Retry-After and text of one POST on the kept connection (a new one when
        there is none or it sat unused too long)."""
        connection = self._connect()
        try:
            connection.request("POST", self._base + path, body=body, headers=headers)
            response = connection.getresponse()
            text = response.read().decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as error:
            self.close()
            message = f"no answer ({error!r}); the outcome is unknown"
            raise GatewayError(0, "no_answer", message) from error
        self._used_at = time.monotonic()
        # After a refusal the gateway may close the connection without saying so (a 401 or a
        # 413 leaves the body unread): a new one is cheaper than an unknown outcome next time.
        if response.will_close or response.status != 200:
            self.close()
        return response.status, response.getheader("Retry-After"), text

    def _connect(self) -> http.client.HTTPConnection:
        if self._connection is not None and time.monotonic() - self._used_at > IDLE_REUSE_S:
            self.close()
        if self._connection is None:
            if self._scheme == "https":
                connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self._timeout_s, context=self._ssl_context
                )
            else:
                connection = http.client.HTTPConnection(
                    self._host, self._port, timeout=self._timeout_s
                )
            try:
                connection.connect()
            except OSError as error:
                connection.close()
                message = f"cannot connect ({error!r}); nothing was sent"
                raise GatewayError(0, "unreachable", message) from error
            self._connection = connection
        return self._connection


def _retryable(failure: GatewayError, safe: bool, attempt: int) -> bool:
    """Whether trying again cannot run the commands twice: after what ran nothing; after an
    unknown outcome with a key (its retry is answered from the cluster) or on reads; after a
    409 on a retry, which is this call's own earlier attempt still running."""
    if failure.code in _NOTHING_RAN:
        return True
    if failure.code == "idempotency_key_in_flight":
        return attempt > 1
    return safe and failure.outcome_unknown


def _backoff_s(attempt: int) -> float:
    ceiling_s = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (attempt - 1))
    return random.uniform(ceiling_s / 2, ceiling_s)


def _seconds(retry_after: Optional[str]) -> float:
    try:
        return max(0.0, float(retry_after)) if retry_after is not None else 0.0
    except ValueError:
        return 0.0


def _command_json(command: Any) -> Any:
    """A typed command's JSON; anything else is taken as a command's JSON already."""
    to_json = getattr(command, "to_json", None)
    return to_json() if callable(to_json) else command


def _outcome(value: Dict[str, Any]) -> Outcome:
    kind = value.get("outcome")
    if kind == "done":
        return Outcome("done", output=_output(value.get("output")))
    if kind == "failed":
        return Outcome("failed", error=_refusal(value.get("error")))
    return Outcome(str(kind))


def _output(value: Any) -> Any:
    """The typed output, or the JSON as sent for a variant this client does not know."""
    if not isinstance(value, dict) or len(value) != 1:
        return value
    [(name, body)] = value.items()
    if name == "Account":
        return Account(body["balance"], body["version"], body["flags"])
    if name == "Transferred":
        return Transferred(body["from_balance"], body["to_balance"])
    if name == "Audit":
        return Audited(body["accounts"], int(body["total"]))
    return value


def _refusal(value: Any) -> Refusal:
    if isinstance(value, dict) and len(value) == 1:
        [(reason, detail)] = value.items()
        return Refusal(reason, detail)
    return Refusal(str(value))
