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
/// (the two POSTs and the change stream's GET) that can send it, that a 503 names `Retry-After`, and that no endpoint lists a status it
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
        for (path, method, endpoint) in [
            ("/v1/commands", "post", Endpoint::Commands),
            ("/v1/reads", "post", Endpoint::Reads),
            ("/v1/changes", "get", Endpoint::Changes),
        ] {
            let response = &document["paths"][path][method]["responses"][&status];
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

/// The schema of one command of `/v1/commands`.
fn command_schema(document: &Value) -> &Value {
    let body = &document["paths"]["/v1/commands"]["post"]["requestBody"];
    &body["content"]["application/json"]["schema"]["items"]
}

/// Proves every object a command holds, at any depth (the variants' objects, the structs
/// in them, a struct of a newtype variant), refuses a key it does not declare, as the
/// gateway does; and that the 400 answer says so.
#[test]
fn command_objects_refuse_unknown_keys() {
    use crate::cli::gateway::tests::Shop;
    let document = openapi_document::<Shop>();
    let command = command_schema(&document);
    let objects: Vec<&Value> = reachable_schemas(&document, command)
        .into_iter()
        .filter(|s| s.get("properties").is_some() || s.get("type") == Some(&json!("object")))
        .collect();
    // Five variants' objects, Pay's, Weigh's and Settle's fields, Parcel and Money.
    assert!(objects.len() >= 10, "{objects:#?}");
    for object in objects {
        assert_eq!(object["additionalProperties"], json!(false), "{object:#}");
    }
    let memo = json!({"Pay": {"from": 1, "to": 2, "amount": 1, "memo": "x"}});
    assert!(validate(&document, command, &memo).is_err());
    let nested = json!({"Weigh": {"parcel": {"id": 1, "colour": "red"}, "grams": 5}});
    assert!(validate(&document, command, &nested).is_err());
    let shipped = json!({"Ship": {"id": 1, "extra": 2}});
    assert!(validate(&document, command, &shipped).is_err());
    let taken = json!({"Weigh": {"parcel": {"id": 1}, "grams": 5}});
    assert_eq!(validate(&document, command, &taken), Ok(()));
    for path in ["/v1/commands", "/v1/reads"] {
        let bad = &document["paths"][path]["post"]["responses"]["400"]["description"];
        let bad = bad.as_str().unwrap();
        assert!(bad.contains("unknown field"), "{path}: {bad}");
        assert!(bad.contains("out of range"), "{path}: {bad}");
    }
}

/// Proves the document describes a 128-bit integer as it is written: a string of digits in
/// every output and error (the gateway's real answer validates; a number is refused), and
/// a number in a command, which is how the gateway reads it, even in a type that commands
/// and outputs share.
#[test]
fn wide_integers_are_described_as_written() {
    use crate::cli::gateway::tests::{Money, Receipt, Refusal, Shop};
    let document = openapi_document::<Shop>();
    let outcomes = vec![
        crate::handler::Outcome::Done(Receipt::Paid {
            balance: u64::MAX,
            total: u128::MAX,
            net: i128::MIN,
        }),
        crate::handler::Outcome::Done(Receipt::Sums(vec![0, u128::MAX])),
        crate::handler::Outcome::Done(Receipt::Maybe(Some(5))),
        crate::handler::Outcome::Done(Receipt::Pair(7, -1)),
        crate::handler::Outcome::Done(Receipt::Lent(Money { cents: u128::MAX })),
        crate::handler::Outcome::Failed(Refusal::Short { needed: 3 }),
    ];
    let response = super::super::answer::outcomes_json::<Shop>(&outcomes);
    let bytes = futures::executor::block_on(axum::body::to_bytes(response.into_body(), usize::MAX))
        .unwrap();
    let answered: Value = serde_json::from_slice(&bytes).unwrap();
    let ok = &document["paths"]["/v1/commands"]["post"]["responses"]["200"];
    let ok = &ok["content"]["application/json"]["schema"];
    assert_eq!(validate(&document, ok, &answered), Ok(()), "{answered}");
    let outcome = json!({ "$ref": format!("{SCHEMAS}{OUTCOME}") });
    let numbers = [
        json!({"outcome": "done", "output": {"Paid": {"balance": 1, "total": 2, "net": "-3"}}}),
        json!({"outcome": "done", "output": {"Lent": {"cents": 5}}}),
        json!({"outcome": "failed", "error": {"Short": {"needed": 3}}}),
        json!({"outcome": "done", "output": {"Sums": ["01"]}}),
        json!({"outcome": "done", "output": {"Paid": {"balance": 1, "total": "-2", "net": "3"}}}),
    ];
    for value in numbers {
        assert!(validate(&document, &outcome, &value).is_err(), "{value}");
    }
    let command = command_schema(&document);
    let lend: Value =
        serde_json::from_str(r#"{"Lend": {"cents": 340282366920938463463374607431768211455}}"#)
            .unwrap();
    assert_eq!(validate(&document, command, &lend), Ok(()), "{lend}");
    let as_string = json!({"Lend": {"cents": "5"}});
    assert!(validate(&document, command, &as_string).is_err());
}
