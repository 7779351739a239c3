//! What a caller is told when it gets no outcomes: each failure with its HTTP status and a
//! JSON body `{"error": CODE, "message": TEXT}` (with `"path"` for a body that names a field
//! wrongly). A status says what the caller may do: 4xx never succeeds as sent, 503 may be
//! retried after `Retry-After` seconds (with the same `Idempotency-Key`, safely).

use super::json::Wide;
use crate::client::{ClientError, SharedError};
use crate::handler::OutcomeOf;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use net::message::Rejection;
use serde_json::json;

/// Seconds a caller is asked to wait before it tries again (`Retry-After`).
pub const RETRY_AFTER_S: u64 = 1;

/// Why a caller's commands have no outcomes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Failure {
    /// The body is not a JSON array of the handler's commands.
    #[error("{message}")]
    BadBody {
        /// The parser's message.
        message: String,
        /// Where in the body (`[2].Transfer.amount`), when known.
        path: Option<String>,
    },
    /// The array holds no command, or more than a request may.
    #[error("a request holds 1 to {max} commands, not {count}")]
    CommandCount {
        /// Commands sent.
        count: usize,
        /// The most a request holds.
        max: usize,
    },
    /// A command sent to `/v1/reads` that only a write may run.
    #[error("command {index} is not read-only: send it to /v1/commands")]
    NotReadOnly {
        /// Its position in the array.
        index: usize,
    },
    /// The body is over the limit.
    #[error("the body is over {max} bytes")]
    TooLarge {
        /// The limit.
        max: usize,
    },
    /// The body did not arrive in time.
    #[error("the body did not arrive within {seconds} s")]
    SlowBody {
        /// The limit.
        seconds: u64,
    },
    /// No `Authorization: Bearer` header, or another token.
    #[error("this gateway needs the caller's token (Authorization: Bearer ...)")]
    Unauthorized,
    /// The `Idempotency-Key` header is empty, too long or not visible ASCII.
    #[error("an Idempotency-Key is 1 to {max} visible ASCII characters")]
    BadKey {
        /// The longest key.
        max: usize,
    },
    /// The key was used before with another body: these commands did not run.
    #[error("this Idempotency-Key was used with other commands; these did not run")]
    KeyReused,
    /// The key is older than the cluster keeps keys: not run now, and whether its first
    /// attempt ran is not known here.
    #[error(
        "this Idempotency-Key is older than the cluster keeps keys; the commands did not run now"
    )]
    KeyExpired,
    /// Another request with this key is in flight through this gateway.
    #[error("a request with this Idempotency-Key is in flight; try again once it is answered")]
    KeyInFlight,
    /// Too many commands wait already.
    #[error("the gateway has too many commands waiting")]
    QueueFull,
    /// The cluster did not answer in time (no leader, busy, full disk): the outcome is not
    /// known.
    #[error("the cluster did not answer in time ({reason}); the outcome is unknown")]
    Unavailable {
        /// What the cluster said last.
        reason: String,
    },
    /// The cluster refused the request as sent (a bug in the gateway, or a halted node).
    #[error("the cluster refused the request: {0}")]
    Rejected(String),
    /// The cluster refused this gateway (credentials, cluster, version) or answered wrongly.
    #[error("the cluster refused this gateway: {0}")]
    Cluster(String),
    /// No random bytes for a session id.
    #[error("the operating system gave no random bytes")]
    NoRandomness,
    /// The gateway is stopping.
    #[error("the gateway is stopping")]
    Stopped,
    /// The binary serves no change stream (its handler did not say what it publishes).
    #[error("this gateway serves no change stream")]
    NoChangeStream,
    /// The `after` of `/v1/changes` is not a position.
    #[error("{0}")]
    BadPosition(String),
    /// No node keeps the position asked for any more.
    #[error("no node holds entry {asked} any more: the oldest any node serves is entry {oldest}")]
    ChangesGone {
        /// The entry asked for.
        asked: u64,
        /// The oldest entry a node serves.
        oldest: u64,
    },
    /// No node holds the changes of these entries.
    #[error("no node holds the changes of entries {from} to {to}")]
    ChangesMissing {
        /// The first entry missing.
        from: u64,
        /// The last entry missing.
        to: u64,
    },
}

impl Failure {
    /// The status a caller gets.
    pub fn status(&self) -> StatusCode {
        match self {
            Failure::BadBody { .. }
            | Failure::CommandCount { .. }
            | Failure::NotReadOnly { .. }
            | Failure::BadKey { .. }
            | Failure::BadPosition(_) => StatusCode::BAD_REQUEST,
            Failure::NoChangeStream => StatusCode::NOT_FOUND,
            Failure::ChangesGone { .. } | Failure::ChangesMissing { .. } => StatusCode::GONE,
            Failure::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Failure::SlowBody { .. } => StatusCode::REQUEST_TIMEOUT,
            Failure::Unauthorized => StatusCode::UNAUTHORIZED,
            Failure::KeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Failure::KeyExpired => StatusCode::GONE,
            Failure::KeyInFlight => StatusCode::CONFLICT,
            Failure::QueueFull | Failure::Unavailable { .. } | Failure::Stopped => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Failure::Rejected(_) | Failure::Cluster(_) | Failure::NoRandomness => {
                StatusCode::BAD_GATEWAY
            }
        }
    }

    /// The failure's code in the body: one word per kind.
    pub fn code(&self) -> &'static str {
        match self {
            Failure::BadBody { .. } => "bad_body",
            Failure::CommandCount { .. } => "command_count",
            Failure::NotReadOnly { .. } => "not_read_only",
            Failure::TooLarge { .. } => "too_large",
            Failure::SlowBody { .. } => "slow_body",
            Failure::Unauthorized => "unauthorized",
            Failure::BadKey { .. } => "bad_idempotency_key",
            Failure::KeyReused => "idempotency_key_reused",
            Failure::KeyExpired => "idempotency_key_expired",
            Failure::KeyInFlight => "idempotency_key_in_flight",
            Failure::QueueFull => "queue_full",
            Failure::Unavailable { .. } => "unavailable",
            Failure::Rejected(_) => "rejected",
            Failure::Cluster(_) => "cluster",
            Failure::NoRandomness => "no_randomness",
            Failure::Stopped => "stopped",
            Failure::NoChangeStream => "no_change_stream",
            Failure::BadPosition(_) => "bad_position",
            Failure::ChangesGone { .. } => "changes_gone",
            Failure::ChangesMissing { .. } => "changes_missing",
        }
    }
}

impl Failure {
    /// What an error of a pooled (unkeyed) session means to its callers: a session the
    /// cluster evicted, or whose number another process took, ran none of these commands, so
    /// they may be sent again (on a new session).
    pub fn pooled(error: &ClientError) -> Failure {
        match error {
            ClientError::SessionExpired(_) | ClientError::Reused(_) | ClientError::Stale(_) => {
                Failure::Unavailable {
                    reason: "the gateway's session ended; nothing ran".into(),
                }
            }
            other @ (ClientError::Rejected(_)
            | ClientError::OutcomeCount { .. }
            | ClientError::Decode(_)
            | ClientError::GaveUp { .. }
            | ClientError::NoRandomness(_)
            | ClientError::Unreachable(_)
            | ClientError::Refused(_)) => Failure::from(other),
        }
    }

    /// What a shared client's failure means to the callers of its request.
    pub fn shared(error: &SharedError) -> Failure {
        match error {
            SharedError::Client(error) => Failure::pooled(error),
            other @ (SharedError::QueueFull { .. }
            | SharedError::TooMany { .. }
            | SharedError::Stopped
            | SharedError::KeyReused
            | SharedError::KeyExpired) => Failure::keyed(other),
        }
    }

    /// What a shared client's failure of a keyed call means: its key's answers are the
    /// caller's; the carrying request's session's are the pool's, as for any caller.
    pub fn keyed(error: &SharedError) -> Failure {
        match error {
            SharedError::QueueFull { .. } => Failure::QueueFull,
            &SharedError::TooMany { count, max } => Failure::CommandCount { count, max },
            SharedError::Client(error) => Failure::pooled(error),
            SharedError::Stopped => Failure::Stopped,
            SharedError::KeyReused => Failure::KeyReused,
            SharedError::KeyExpired => Failure::KeyExpired,
        }
    }
}

impl From<ClientError> for Failure {
    fn from(error: ClientError) -> Self {
        Failure::from(&error)
    }
}

impl From<&ClientError> for Failure {
    fn from(error: &ClientError) -> Self {
        match error {
            ClientError::GaveUp { last_rejection, .. } => Failure::Unavailable {
                reason: match last_rejection {
                    Some(Rejection::Busy) => "busy".into(),
                    Some(Rejection::StorageFull) => "storage full".into(),
                    Some(other) => format!("{other:?}"),
                    None => "no leader answered".into(),
                },
            },
            ClientError::Rejected(Rejection::Halted) => Failure::Unavailable {
                reason: "the leader halted".into(),
            },
            ClientError::Rejected(rejection) => Failure::Rejected(format!("{rejection:?}")),
            ClientError::SessionExpired(_) => Failure::KeyExpired,
            ClientError::Reused(_) | ClientError::Stale(_) => Failure::KeyReused,
            ClientError::NoRandomness(_) => Failure::NoRandomness,
            other @ (ClientError::OutcomeCount { .. }
            | ClientError::Decode(_)
            | ClientError::Unreachable(_)
            | ClientError::Refused(_)) => Failure::Cluster(other.to_string()),
        }
    }
}

impl Failure {
    /// The JSON body a caller gets: `error` and `message`, and what the kind names (the
    /// field's `path`, the `oldest` entry served, the entries `from` and `to` missing).
    pub fn body(&self) -> serde_json::Value {
        let mut body = json!({ "error": self.code(), "message": self.to_string() });
        if let Failure::BadBody {
            path: Some(path), ..
        } = self
        {
            body["path"] = json!(path);
        }
        if let Failure::ChangesGone { oldest, .. } = self {
            body["oldest"] = json!(oldest);
        }
        if let Failure::ChangesMissing { from, to } = self {
            body["from"] = json!(from);
            body["to"] = json!(to);
        }
        body
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let mut response = (self.status(), axum::Json(self.body())).into_response();
        if self.status() == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
        }
        response
    }
}

/// The outcomes as the caller gets them: a JSON array, one object per command, in order
/// (`{"outcome":"done","output":...}`, `{"outcome":"failed","error":...}` or
/// `{"outcome":"invalid"}`; a 128-bit integer in an output or error as a string of digits,
/// as `client` prints it: [`Wide`]), written straight into the body: building a `serde_json::Value`
/// tree first cost the gateway most of its time at 256 commands a request, and the fixed
/// parts are written as bytes because escaping them as strings was the next largest cost.
pub fn outcomes_json<H: crate::cli::CliHandler>(outcomes: &[OutcomeOf<H>]) -> Response {
    match write_outcomes(outcomes) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(error) => {
            Failure::Cluster(format!("an outcome does not serialize: {error}")).into_response()
        }
    }
}

/// The JSON array [`outcomes_json`] answers with.
fn write_outcomes<O: serde::Serialize, E: serde::Serialize>(
    outcomes: &[crate::handler::Outcome<O, E>],
) -> serde_json::Result<Vec<u8>> {
    let mut body = Vec::with_capacity(OUTCOME_JSON_BYTES_GUESS * outcomes.len() + 2);
    body.push(b'[');
    for (index, outcome) in outcomes.iter().enumerate() {
        if index > 0 {
            body.push(b',');
        }
        write_outcome(outcome, &mut body)?;
    }
    body.push(b']');
    Ok(body)
}

/// One outcome's JSON, as the gateway answers each, appended to `body`.
pub fn write_outcome<O: serde::Serialize, E: serde::Serialize>(
    outcome: &crate::handler::Outcome<O, E>,
    body: &mut Vec<u8>,
) -> serde_json::Result<()> {
    use crate::handler::Outcome;
    match outcome {
        Outcome::Done(output) => {
            body.extend_from_slice(br#"{"outcome":"done","output":"#);
            serde_json::to_writer(&mut *body, &Wide(output))?;
            body.push(b'}');
        }
        Outcome::Failed(error) => {
            body.extend_from_slice(br#"{"outcome":"failed","error":"#);
            serde_json::to_writer(&mut *body, &Wide(error))?;
            body.push(b'}');
        }
        Outcome::Invalid => body.extend_from_slice(br#"{"outcome":"invalid"}"#),
    }
    Ok(())
}

/// Bytes an outcome's JSON is guessed to take, to size the body once for most handlers.
const OUTCOME_JSON_BYTES_GUESS: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handler::Outcome;

    /// Proves each kind of outcome is written as the documented object, in order, and the
    /// whole is one JSON array (empty included).
    #[test]
    fn outcomes_are_written_as_documented() {
        let outcomes: Vec<Outcome<Vec<u64>, String>> = vec![
            Outcome::Done(vec![1, 2]),
            Outcome::Failed("no \"funds\"".into()),
            Outcome::Invalid,
        ];
        let body = write_outcomes(&outcomes).unwrap();
        let parsed: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            parsed,
            json!([
                {"outcome": "done", "output": [1, 2]},
                {"outcome": "failed", "error": "no \"funds\""},
                {"outcome": "invalid"},
            ])
        );
        let none: Vec<Outcome<u64, u64>> = Vec::new();
        assert_eq!(write_outcomes(&none).unwrap(), b"[]");
    }

    /// Proves the gateway's answer and `client`'s output (`outcome_json`) give every field
    /// of the same outcome the same JSON, type and value: a 128-bit integer, at any depth
    /// and of any size, is a string of its decimal digits in both; a 64-bit one a number.
    #[test]
    fn gateway_and_client_write_the_same_json_types() {
        use crate::cli::gateway::tests::{Parcel, Receipt, Refusal, Shop};
        let outcomes: Vec<OutcomeOf<Shop>> = vec![
            Outcome::Done(Receipt::Paid {
                balance: u64::MAX,
                total: u128::MAX,
                net: i128::MIN,
            }),
            Outcome::Done(Receipt::Paid {
                balance: 1,
                total: 2,
                net: -3,
            }),
            Outcome::Done(Receipt::Shipped(Parcel {
                id: 7,
                label: Some("a".into()),
            })),
            Outcome::Done(Receipt::Sums(vec![0, u128::from(u64::MAX) + 1])),
            Outcome::Done(Receipt::Maybe(Some(5))),
            Outcome::Done(Receipt::Maybe(None)),
            Outcome::Done(Receipt::Pair(u128::MAX, -1)),
            Outcome::Failed(Refusal::Short { needed: u128::MAX }),
            Outcome::Failed(Refusal::Full),
            Outcome::Invalid,
        ];
        let written = write_outcomes(&outcomes).unwrap();
        let gateway: Vec<serde_json::Value> = serde_json::from_slice(&written).unwrap();
        let client: Vec<serde_json::Value> = outcomes
            .iter()
            .map(crate::cli::outcome_json::<Shop>)
            .collect();
        assert_eq!(gateway, client);
        assert_eq!(
            gateway[0],
            json!({"outcome": "done", "output": {"Paid": {
                "balance": u64::MAX,
                "total": u128::MAX.to_string(),
                "net": i128::MIN.to_string(),
            }}})
        );
        assert_eq!(gateway[1]["output"]["Paid"]["total"], json!("2"));
        assert_eq!(
            gateway[3]["output"]["Sums"],
            json!(["0", "18446744073709551616"])
        );
        assert_eq!(gateway[4]["output"]["Maybe"], json!("5"));
        assert_eq!(
            gateway[6]["output"]["Pair"][0],
            json!(u128::MAX.to_string())
        );
        assert_eq!(
            gateway[7]["error"]["Short"]["needed"],
            json!(u128::MAX.to_string())
        );
    }
}
