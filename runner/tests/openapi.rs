//! The Bank's OpenAPI document (`GET /v1/openapi.json`) against the Bank's real JSON: the
//! command schema takes the commands callers send and the workload's, and refuses others;
//! the outcomes of real executions, in the sandbox and through a running gateway over
//! HTTP (written by the gateway itself), validate against the outcome and error schemas.
//! A serde attribute or a hand-written `Serialize` that the derive cannot mirror fails here.

mod common;

use bank::workload::{TransferMix, open_command};
use bank::{AccountId, Bank, BankCommand};
use common::gateway::{Gateway, TOKEN};
use common::start_cluster;
use engine::cli::gateway::{openapi_document, reachable_schemas, validate};
use engine::rng::Rng;
use engine::{Outcome, Sandbox};
use serde_json::{Value, json};

/// Commands drawn from the Bank's transfer workload for the command schema.
const WORKLOAD_COMMANDS: u32 = 200;
/// State bytes of the sandbox: room for the few accounts the tests open.
const SANDBOX_STATE_BYTES: u64 = 1 << 20;

/// The schema of one command, as `POST /v1/commands` takes them.
fn command_schema(document: &Value) -> &Value {
    let body = &document["paths"]["/v1/commands"]["post"]["requestBody"];
    &body["content"]["application/json"]["schema"]["items"]
}

/// The schema of a `POST` answer of `status`.
fn answer_schema<'a>(document: &'a Value, path: &str, status: u16) -> &'a Value {
    let response = &document["paths"][path]["post"]["responses"][status.to_string()];
    let schema = &response["content"]["application/json"]["schema"];
    assert!(schema.is_object(), "{path} documents no {status}");
    schema
}

fn assert_valid(document: &Value, schema: &Value, value: &Value) {
    if let Err(error) = validate(document, schema, value) {
        panic!("{value} does not match {schema}: {error}");
    }
}

/// Proves the Bank's command schema takes the commands the gateway's callers send (and
/// every kind the workload draws), and refuses a command the Bank does not have.
#[test]
fn the_command_schema_takes_the_banks_commands() {
    let document = openapi_document::<Bank>();
    let schema = command_schema(&document);
    assert_eq!(schema, &json!({"$ref": "#/components/schemas/BankCommand"}));
    let sent = [
        json!({"Open": {"id": 7, "balance": 100, "flags": 0}}),
        json!({"Transfer": {"from": 7, "to": 8, "amount": 5}}),
        json!({"Get": {"id": 7}}),
        json!("Audit"),
        json!({"Deposit": {"id": 7, "amount": 1}}),
        json!({"Withdraw": {"id": 7, "amount": u64::MAX}}),
    ];
    for command in &sent {
        assert_valid(&document, schema, command);
    }
    let mix = TransferMix::new(1000).with_reads(30);
    let mut rng = Rng::new(7);
    let drawn = (0..WORKLOAD_COMMANDS).map(|_| mix.command(&mut rng));
    for command in drawn.chain([open_command(3)]) {
        assert_valid(&document, schema, &serde_json::to_value(command).unwrap());
    }
    let refused = [
        json!({"Nope": 1}),
        json!({"Transfer": {"from": 7, "to": 8}}),
        json!({"Get": {"id": -1}}),
        json!({"Get": {"id": 7}, "Audit": null}),
        json!("Get"),
    ];
    for command in &refused {
        assert!(validate(&document, schema, command).is_err(), "{command}");
    }
    let schemas = document["components"]["schemas"].as_object().unwrap();
    let names: Vec<&str> = schemas.keys().map(String::as_str).collect();
    let expected = [
        "Account",
        "AccountId",
        "BankCommand",
        "BankError",
        "BankOutput",
    ];
    assert_eq!(names, [&expected[..], &["ErrorBody", "Outcome"]].concat());
}

/// Proves every object schema a Bank command holds (each variant's wrapper and its fields'
/// object) refuses a key it does not declare, as the gateway refuses such a command; that
/// the 400 answer says so; and that the audit's `u128` total is described as the string
/// of digits the gateway and `runner client` write.
#[test]
fn the_command_schema_refuses_unknown_fields() {
    let document = openapi_document::<Bank>();
    let command = command_schema(&document);
    let objects: Vec<&Value> = reachable_schemas(&document, command)
        .into_iter()
        .filter(|s| s.get("properties").is_some() || s.get("type") == Some(&json!("object")))
        .collect();
    // Five variants with fields, each a wrapper and an object of its fields.
    assert_eq!(objects.len(), 10, "{objects:#?}");
    for object in objects {
        assert_eq!(object["additionalProperties"], json!(false), "{object:#}");
    }
    let memo = json!({"Transfer": {"from": 7, "to": 8, "amount": 5, "memo": "x"}});
    assert!(validate(&document, command, &memo).is_err());
    let bad = &document["paths"]["/v1/commands"]["post"]["responses"]["400"]["description"];
    assert!(bad.as_str().unwrap().contains("unknown field"), "{bad}");
    let audit = &document["components"]["schemas"]["BankOutput"]["oneOf"];
    let audit = audit
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["required"] == json!(["Audit"]));
    let total = &audit.expect("the Audit variant")["properties"]["Audit"]["properties"]["total"];
    assert_eq!(total["type"], "string", "{total}");
    let outcome = json!({"$ref": "#/components/schemas/Outcome"});
    let written = json!({"outcome": "done", "output": {"Audit": {"accounts": 2, "total": "100"}}});
    assert_valid(&document, &outcome, &written);
    let number = json!({"outcome": "done", "output": {"Audit": {"accounts": 2, "total": 100}}});
    assert!(validate(&document, &outcome, &number).is_err());
}

/// Commands that give every kind of output and several business errors.
fn commands() -> Vec<BankCommand> {
    let (a, b) = (AccountId(7), AccountId(8));
    vec![
        BankCommand::Open {
            id: a,
            balance: 100,
            flags: 3,
        },
        BankCommand::Open {
            id: b,
            balance: 0,
            flags: 0,
        },
        BankCommand::Open {
            id: a,
            balance: 1,
            flags: 0,
        },
        BankCommand::Transfer {
            from: a,
            to: b,
            amount: 5,
        },
        BankCommand::Transfer {
            from: a,
            to: a,
            amount: 5,
        },
        BankCommand::Withdraw { id: b, amount: 50 },
        BankCommand::Deposit { id: a, amount: 0 },
        BankCommand::Get { id: AccountId(0) },
        BankCommand::Get { id: AccountId(9) },
        BankCommand::Get { id: b },
        BankCommand::Audit,
    ]
}

/// Proves the outcomes of real executions in the sandbox, as the client prints them,
/// validate against the outcome schema, done and failed alike.
#[test]
fn sandbox_outcomes_validate() {
    let document = openapi_document::<Bank>();
    let schema = json!({"$ref": "#/components/schemas/Outcome"});
    let mut sandbox = Sandbox::new(Bank, SANDBOX_STATE_BYTES);
    let outcomes = sandbox.run(&commands()).unwrap();
    let failed = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Failed(_)))
        .count();
    assert!(failed >= 5, "{outcomes:?}");
    for outcome in &outcomes {
        assert_valid(
            &document,
            &schema,
            &engine::cli::outcome_json::<Bank>(outcome),
        );
    }
    assert_valid(&document, &schema, &json!({"outcome": "invalid"}));
}

/// Proves the gateway's own answers over HTTP validate against the document: the outcomes
/// of `/v1/commands` and `/v1/reads` (done and failed) and the bodies of a 400 and a 401;
/// and that `GET /v1/openapi.json` serves the document itself, to callers without a token.
#[test]
fn gateway_answers_validate() {
    let document = openapi_document::<Bank>();
    let dir = tempfile::tempdir().unwrap();
    let (nodes, _) = start_cluster(dir.path(), |_| {});
    let gateway = Gateway::start(dir.path(), &nodes.cluster_file, "gateway");
    let body = serde_json::to_string(&commands()).unwrap();
    let answered = gateway.commands(&body, &["Idempotency-Key: openapi-1"]);
    assert_eq!(answered.as_array().map(Vec::len), Some(commands().len()));
    assert_valid(
        &document,
        answer_schema(&document, "/v1/commands", 200),
        &answered,
    );
    let (status, read) = gateway.post(
        "/v1/reads",
        r#"["Audit", {"Get": {"id": 9}}]"#,
        Some(TOKEN),
        &[],
    );
    assert_eq!(
        (status, &read[1]["outcome"]),
        (200, &json!("failed")),
        "{read}"
    );
    assert_valid(&document, answer_schema(&document, "/v1/reads", 200), &read);
    let (status, bad) = gateway.post("/v1/commands", r#"[{"Nope": 1}]"#, Some(TOKEN), &[]);
    assert_eq!(status, 400, "{bad}");
    assert_valid(
        &document,
        answer_schema(&document, "/v1/commands", 400),
        &bad,
    );
    let (status, refused) = gateway.post("/v1/reads", r#"["Audit"]"#, None, &[]);
    assert_eq!(status, 401, "{refused}");
    assert_valid(
        &document,
        answer_schema(&document, "/v1/reads", 401),
        &refused,
    );
    let (status, served) = gateway.get("/v1/openapi.json");
    assert_eq!(status, 200, "served without the token: {served}");
    let served: Value = serde_json::from_str(&served).unwrap();
    assert_eq!(
        served, document,
        "the gateway serves the handler's document"
    );
}
