//! The document against the gateway's own answers: every failure's body (as `answer.rs`
//! writes it) matches its status's schema on the endpoints that can send it, and a handler
//! type that takes one of the document's names gets another.

use super::*;
use crate::codec::{Decode, Encode};
use crate::handler::Handler;
use crate::state::{Schema, StateError, Tx};
use axum::response::IntoResponse;

/// A handler whose error type is named as the document's outcome schema.
struct Named;

#[derive(Debug, Encode, Decode, serde::Serialize, serde::Deserialize)]
#[codec(crate = "crate::codec")]
enum Outcome {
    /// Refused.
    Refused,
}

impl From<StateError> for Outcome {
    fn from(_: StateError) -> Self {
        Outcome::Refused
    }
}

impl Handler for Named {
    type Command = u64;
    type Output = Option<String>;
    type Error = Outcome;

    fn schema(&self) -> Schema {
        Schema::new()
    }

    fn execute(&self, _: &mut Tx<'_>, _: &u64) -> Result<Option<String>, Outcome> {
        Err(Outcome::Refused)
    }
}

/// The body `answer.rs` writes for `failure`, as JSON.
fn body_of(failure: Failure) -> Value {
    let body = failure.into_response().into_body();
    let bytes = futures::executor::block_on(axum::body::to_bytes(body, usize::MAX));
    serde_json::from_slice(&bytes.expect("a body in memory")).expect("a JSON body")
}

/// Proves every failure's body validates against the schema of its status on each endpoint
/// that can send it, that a 503 names `Retry-After`, and that no endpoint lists a status it
/// cannot send.
#[test]
fn failures_match_their_responses() {
    let document = openapi_document::<Named>();
    let bad_body = Failure::BadBody {
        message: "expected value".into(),
        path: Some("[0].Transfer".into()),
    };
    for (failure, endpoints) in every_failure().into_iter().chain([(bad_body, BOTH)]) {
        let status = failure.status().as_u16().to_string();
        let code = failure.code();
        let body = body_of(failure);
        let any_error = json!({ "$ref": format!("{SCHEMAS}{ERROR_BODY}") });
        assert_eq!(validate(&document, &any_error, &body), Ok(()), "{code}");
        for (path, endpoint) in [
            ("/v1/commands", Endpoint::Commands),
            ("/v1/reads", Endpoint::Reads),
        ] {
            let response = &document["paths"][path]["post"]["responses"][&status];
            let schema = &response["content"]["application/json"]["schema"];
            if !endpoints.contains(&endpoint) {
                assert!(
                    validate(&document, schema, &body).is_err(),
                    "{path} lists {code}"
                );
                continue;
            }
            validate(&document, schema, &body).unwrap_or_else(|e| panic!("{path} {code}: {e}"));
            let retry = response["headers"].get("Retry-After").is_some();
            assert_eq!(retry, status == "503", "{path} {status}");
        }
    }
}

/// Proves a handler type named as one of the document's schemas gets its path as its name,
/// and the document's own schema keeps the name.
#[test]
fn handler_types_do_not_take_the_documents_names() {
    let document = openapi_document::<Named>();
    let schemas = &document["components"]["schemas"];
    let theirs = schemas
        .as_object()
        .unwrap()
        .keys()
        .find(|name| name.ends_with(".Outcome"))
        .expect("the handler's Outcome, renamed");
    assert_eq!(
        schemas[theirs]["oneOf"][0],
        json!({"const": "Refused", "description": "Refused."})
    );
    let ours = json!({ "$ref": format!("{SCHEMAS}{OUTCOME}") });
    let failed = json!({"outcome": "failed", "error": "Refused"});
    assert_eq!(validate(&document, &ours, &failed), Ok(()));
    let done = json!({"outcome": "done", "output": null});
    assert_eq!(validate(&document, &ours, &done), Ok(()));
    assert!(validate(&document, &ours, &json!({"outcome": "done"})).is_err());
    let commands = &document["paths"]["/v1/commands"]["post"]["requestBody"]["content"];
    let commands = &commands["application/json"]["schema"];
    assert_eq!(validate(&document, commands, &json!([7])), Ok(()));
    assert!(validate(&document, commands, &json!([])).is_err());
    assert!(validate(&document, commands, &json!([-1])).is_err());
}
