//! `GET /v1/openapi.json`: the gateway's endpoints, statuses and headers, and the handler's
//! command, output and error types, as an OpenAPI 3.1 document. The types' schemas come from
//! their [`Describe`] impls, which the `Encode` derive writes (so a handler author adds
//! nothing); the outcome wrapper and the error body are this module's, kept to `answer.rs`
//! by matches over its types and by the tests that validate real answers against them.

mod schema;
mod validate;

pub use schema::json_schema;
pub use validate::{SchemaMismatch, reachable_schemas, validate};

use super::answer::{Failure, RETRY_AFTER_S};
use super::{
    GATEWAY_BODY_BYTES_MAX, GATEWAY_HEADER_BYTES_MAX, GATEWAY_HEADERS_MAX,
    IDEMPOTENCY_KEY_CHARS_MAX,
};
use crate::cli::CliHandler;
use crate::codec::{Definitions, Describe};
use crate::entry::REQUEST_COMMANDS_MAX;
use crate::handler::Outcome;
use serde_json::{Map, Value, json};

/// Where the document's schemas are.
const SCHEMAS: &str = "#/components/schemas/";
/// The schema of one outcome; no handler type is given this name.
const OUTCOME: &str = "Outcome";
/// The schema of a failure's body; no handler type is given this name.
const ERROR_BODY: &str = "ErrorBody";
/// The media type of `/metrics`.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The OpenAPI 3.1 document of a gateway serving `H`: the paths with their statuses and
/// headers; in `components.schemas` the handler's named types, the outcome wrapper
/// (`Outcome`) and the error body (`ErrorBody`).
pub fn openapi_document<H: CliHandler>() -> Value {
    let mut definitions = Definitions::new();
    definitions.reserve(OUTCOME);
    definitions.reserve(ERROR_BODY);
    let command = H::Command::describe(&mut definitions);
    let output = H::Output::describe(&mut definitions);
    let error = H::Error::describe(&mut definitions);
    let described = schema::described(&definitions, &command, &[&output, &error], SCHEMAS);
    let (command, mut schemas) = (described.command, described.schemas);
    let [output, error]: [Value; 2] = described.answers.try_into().expect("two answers");
    schemas.insert(OUTCOME.into(), outcome_schema(output, error));
    schemas.insert(ERROR_BODY.into(), error_body_schema());
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": format!("{} over HTTP", std::any::type_name::<H>()),
            "version": "1",
            "description": "The engine's gateway: the handler's commands as JSON (serde's \
                mapping of its types), each answered with its outcome once committed. A \
                command's unknown field refuses the request (400). A 128-bit integer is a \
                string of decimal digits in an output or error (a JSON number past 2^53 \
                loses digits in JavaScript), and a number in a command.",
            "x-handler-versions": [H::VERSIONS.start(), H::VERSIONS.end()],
        },
        "paths": paths(&command),
        "components": {
            "schemas": schemas,
            "parameters": { "IdempotencyKey": idempotency_key() },
            "headers": { "Retry-After": {
                "description": "Seconds to wait before sending the same request again \
                    (with the same Idempotency-Key).",
                "schema": { "type": "integer", "minimum": 0, "examples": [RETRY_AFTER_S] },
            }},
            "securitySchemes": { "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "The callers' token, when the gateway has a --token-file.",
            }},
        },
    })
}

/// The answer to `GET /v1/openapi.json`: the document of `H`, built per request (the route is
/// not on the commands' path, and a cache per handler type would need a map of them).
pub async fn openapi_json<H: CliHandler>() -> axum::Json<Value> {
    axum::Json(openapi_document::<H>())
}

/// One outcome as `answer.rs` writes it: `{"outcome": "done", "output": ...}`,
/// `{"outcome": "failed", "error": ...}` or `{"outcome": "invalid"}`.
fn outcome_schema(output: Value, error: Value) -> Value {
    let member = |tag: &str, content: Option<(&str, Value)>| {
        let mut properties = Map::new();
        properties.insert("outcome".into(), json!({ "const": tag }));
        let mut required = vec!["outcome".to_owned()];
        if let Some((key, schema)) = content {
            properties.insert(key.into(), schema);
            required.push(key.into());
        }
        json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        })
    };
    // A match over every kind of outcome, so that a new one is described here too.
    let each = [Outcome::Done(()), Outcome::Failed(()), Outcome::Invalid].map(|kind| match kind {
        Outcome::Done(()) => member("done", Some(("output", output.clone()))),
        Outcome::Failed(()) => member("failed", Some(("error", error.clone()))),
        Outcome::Invalid => member("invalid", None),
    });
    json!({
        "description": "What became of one command: it applied (the handler's output), the \
            handler refused it (its error; nothing changed), or it did not decode as a command.",
        "oneOf": each,
    })
}

/// The body of every failure: `{"error": CODE, "message": TEXT, "path"?}`.
fn error_body_schema() -> Value {
    let codes: Vec<&str> = every_failure().iter().map(|(f, _)| f.code()).collect();
    json!({
        "type": "object",
        "properties": {
            "error": { "type": "string", "enum": codes },
            "message": { "type": "string" },
            "path": {
                "type": "string",
                "description": "Where in the body a bad body went wrong (`[2].Transfer.amount`).",
            },
            "oldest": {
                "type": "integer",
                "minimum": 1,
                "description": "changes_gone: the oldest entry a node still serves.",
            },
            "from": {
                "type": "integer",
                "description": "changes_missing: the first entry no node holds changes of.",
            },
            "to": {
                "type": "integer",
                "description": "changes_missing: the last entry no node holds changes of.",
            },
        },
        "required": ["error", "message"],
        "additionalProperties": false,
    })
}

/// The `Idempotency-Key` header.
fn idempotency_key() -> Value {
    json!({
        "name": "Idempotency-Key",
        "in": "header",
        "required": false,
        "description": format!(
            "1 to {IDEMPOTENCY_KEY_CHARS_MAX} visible ASCII characters. The cluster keeps the \
             key with its outcomes: a retry through any gateway gets the first answer, and the \
             commands never run twice."
        ),
        "schema": {
            "type": "string",
            "minLength": 1,
            "maxLength": IDEMPOTENCY_KEY_CHARS_MAX,
        },
    })
}

/// The endpoints: the two POSTs of commands, the probes, the metrics and this document.
fn paths(command: &Value) -> Value {
    let text = |description: &str| {
        json!({ "description": description, "content": { "text/plain": {
            "schema": { "type": "string" } } } })
    };
    json!({
        "/v1/commands": { "post": post(Endpoint::Commands, command) },
        "/v1/reads": { "post": post(Endpoint::Reads, command) },
        "/v1/changes": { "get": changes_get(command) },
        "/livez": { "get": {
            "summary": "The gateway process answers.",
            "responses": { "200": text("ok") },
        }},
        "/readyz": { "get": {
            "summary": "A node of the cluster says it leads.",
            "responses": { "200": text("ready"), "503": text("no leader answers") },
        }},
        "/metrics": { "get": {
            "summary": "The gateway's metrics (Prometheus, OpenMetrics text).",
            "responses": { "200": { "description": "The metrics.", "content": {
                OPENMETRICS: { "schema": { "type": "string" } } } } },
        }},
        "/v1/openapi.json": { "get": {
            "summary": "This document.",
            "responses": { "200": { "description": "The OpenAPI document.", "content": {
                "application/json": { "schema": { "type": "object" } } } } },
        }},
    })
}

/// Which endpoint a failure can answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Endpoint {
    Commands,
    Reads,
    Changes,
}

/// `GET /v1/changes`: the change stream as newline-delimited JSON.
fn changes_get(command: &Value) -> Value {
    let line = json!({
        "type": "object",
        "description": "One committed command and its outcome (what the handler publishes of \
            them: by default the command as sent and its outcome), or, with `upgrade`, the \
            entry where the handler version changed (`command` and `outcome` null).",
        "properties": {
            "index": { "type": "integer", "minimum": 1, "description": "The log entry." },
            "position": { "type": "integer", "minimum": 0,
                "description": "The command's position in the entry." },
            "version": { "type": "integer", "description": "The handler version it ran under." },
            "command": { "anyOf": [command, { "type": "null" }] },
            "outcome": { "anyOf": [{ "$ref": format!("{SCHEMAS}{OUTCOME}") }, { "type": "null" }] },
            "upgrade": { "type": "object", "properties": {
                "from": { "type": "integer" }, "to": { "type": "integer" } } },
            "error": { "type": "string",
                "description": "The last line of a stream that cannot go on: an error body." },
        },
    });
    let mut responses = Map::new();
    responses.insert(
        "200".into(),
        json!({
            "description": "One JSON object a line, in commit order, following new commits \
                until the caller closes. Positions (`index`.`position`) make a consumer \
                idempotent: a line seen twice has the same position.",
            "content": { "application/x-ndjson": { "schema": line } },
        }),
    );
    responses.extend(failure_responses(Endpoint::Changes));
    json!({
        "summary": "Every committed command and its outcome, in commit order, from a position on.",
        "description": "Read from a follower first. The stream serves what the log still \
            holds: a position older than every node keeps is a 410 naming the oldest served.",
        "security": [{ "bearer": [] }, {}],
        "parameters": [{
            "name": "after",
            "in": "query",
            "required": false,
            "description": "ENTRY or ENTRY.POSITION: the stream starts with the command after \
                it (0 or none: the first entry).",
            "schema": { "type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?$" },
        }],
        "responses": responses,
    })
}

/// `POST /v1/commands` or `POST /v1/reads`.
fn post(endpoint: Endpoint, command: &Value) -> Value {
    let (summary, description) = match endpoint {
        Endpoint::Commands => (
            "Runs commands, each once, in order; answers with their outcomes once committed.",
            "Concurrent callers' commands share engine requests; a command of one caller \
             never sees another's half done.",
        ),
        Endpoint::Reads => (
            "Runs read-only commands off the log (linearizable); answers with their outcomes.",
            "Every command must be read-only: one that is not makes the request a 400.",
        ),
        Endpoint::Changes => unreachable!("GET /v1/changes is described by changes_get"),
    };
    let mut responses = Map::new();
    responses.insert(
        "200".into(),
        json!({
            "description": "One outcome per command, in the commands' order.",
            "content": { "application/json": { "schema": {
                "type": "array", "items": { "$ref": format!("{SCHEMAS}{OUTCOME}") },
            }}},
        }),
    );
    responses.extend(failure_responses(endpoint));
    // hyper answers it before the gateway sees the request, without a body.
    responses.insert(
        "431".into(),
        json!({ "description": format!(
            "Request Header Fields Too Large: the request's head is over \
             {GATEWAY_HEADER_BYTES_MAX} bytes or {GATEWAY_HEADERS_MAX} header fields."
        )}),
    );
    let mut operation = json!({
        "summary": summary,
        "description": description,
        "security": [{ "bearer": [] }, {}],
        "requestBody": { "required": true, "content": { "application/json": { "schema": {
            "type": "array",
            "items": command,
            "minItems": 1,
            "maxItems": REQUEST_COMMANDS_MAX,
            "description": format!("At most {GATEWAY_BODY_BYTES_MAX} bytes."),
        }}}},
        "responses": responses,
    });
    if endpoint == Endpoint::Commands {
        operation["parameters"] = json!([{ "$ref": "#/components/parameters/IdempotencyKey" }]);
    }
    operation
}

/// The failures `endpoint` answers with, one response per status, each listing its codes.
fn failure_responses(endpoint: Endpoint) -> Map<String, Value> {
    let mut by_status: std::collections::BTreeMap<u16, Vec<&str>> = Default::default();
    for (failure, endpoints) in every_failure() {
        if endpoints.contains(&endpoint) {
            let status = failure.status().as_u16();
            by_status.entry(status).or_default().push(failure.code());
        }
    }
    let retry = json!({ "Retry-After": { "$ref": "#/components/headers/Retry-After" } });
    by_status
        .into_iter()
        .map(|(status, codes)| {
            let reason = axum::http::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("Refused");
            let mut description = format!("{reason}: {}.", codes.join(", "));
            if status == axum::http::StatusCode::BAD_REQUEST.as_u16() {
                description.push_str(BAD_BODY);
            }
            let mut response = json!({
                "description": description,
                "content": { "application/json": { "schema": { "allOf": [
                    { "$ref": format!("{SCHEMAS}{ERROR_BODY}") },
                    { "properties": { "error": { "enum": codes } } },
                ]}}},
            });
            if status == axum::http::StatusCode::SERVICE_UNAVAILABLE.as_u16() {
                response["headers"] = retry.clone();
            }
            (status.to_string(), response)
        })
        .collect()
}

const BOTH: &[Endpoint] = &[Endpoint::Commands, Endpoint::Reads];
const EVERY: &[Endpoint] = &[Endpoint::Commands, Endpoint::Reads, Endpoint::Changes];

/// What the 400 answer adds about a body: the gateway reads commands strictly.
const BAD_BODY: &str = " A command is read strictly: an unknown field (one its type does not \
    have) refuses the whole request, as does an integer out of range for its field (named \
    as sent); the body's `path` names the field (`[0].Transfer.memo`), and none of the \
    commands ran.";

/// Every kind of failure, with the endpoints that can answer with it. The match is over
/// every kind, so that a new one cannot be added without deciding here where it answers;
/// the list beside it must then gain the new kind too.
fn every_failure() -> Vec<(Failure, &'static [Endpoint])> {
    let text = String::new;
    let all = [
        Failure::BadBody {
            message: text(),
            path: None,
        },
        Failure::CommandCount { count: 0, max: 0 },
        Failure::NotReadOnly { index: 0 },
        Failure::TooLarge { max: 0 },
        Failure::SlowBody { seconds: 0 },
        Failure::Unauthorized,
        Failure::BadKey { max: 0 },
        Failure::KeyReused,
        Failure::KeyExpired,
        Failure::KeyInFlight,
        Failure::QueueFull,
        Failure::Unavailable { reason: text() },
        Failure::Rejected(text()),
        Failure::Cluster(text()),
        Failure::NoRandomness,
        Failure::Stopped,
        Failure::NoChangeStream,
        Failure::BadPosition(text()),
        Failure::ChangesGone {
            asked: 1,
            oldest: 2,
        },
        Failure::ChangesMissing { from: 0, to: 0 },
    ];
    all.into_iter()
        .map(|failure| {
            let endpoints: &'static [Endpoint] = match failure {
                Failure::NotReadOnly { .. } => &[Endpoint::Reads],
                // Only a keyed request, on /v1/commands, has a session of its own.
                Failure::KeyReused | Failure::KeyExpired | Failure::KeyInFlight => {
                    &[Endpoint::Commands]
                }
                Failure::NoChangeStream
                | Failure::BadPosition(_)
                | Failure::ChangesGone { .. }
                | Failure::ChangesMissing { .. } => &[Endpoint::Changes],
                Failure::Unauthorized | Failure::Unavailable { .. } | Failure::Cluster(_) => EVERY,
                Failure::BadBody { .. }
                | Failure::CommandCount { .. }
                | Failure::TooLarge { .. }
                | Failure::SlowBody { .. }
                | Failure::BadKey { .. }
                | Failure::QueueFull
                | Failure::Rejected(_)
                | Failure::NoRandomness
                | Failure::Stopped => BOTH,
            };
            (failure, endpoints)
        })
        .collect()
}

#[cfg(test)]
mod tests;
