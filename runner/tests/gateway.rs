//! `runner gateway` over real processes: three nodes and gateways, called over HTTP/1.1 on
//! TCP. Commands and reads answer with their outcomes; every kind of bad request gets its
//! status and leaves the cluster unchanged; an idempotency key runs its commands once, even
//! when the gateway that took the first attempt is gone and the retry reaches another.

mod common;

use common::gateway::{Gateway, TOKEN, exchange};
use common::start_cluster;
use serde_json::json;

/// The audit's accounts and total, read off the log (the total, a `u128`, is a string of
/// digits, as every output of the engine writes one).
fn audit(gateway: &Gateway) -> (u64, u128) {
    let (status, value) = gateway.post("/v1/reads", r#"["Audit"]"#, Some(TOKEN), &[]);
    assert_eq!(status, 200, "{value}");
    let figures = &value[0]["output"]["Audit"];
    let total = figures["total"].as_str().expect("the total as a string");
    (
        figures["accounts"].as_u64().unwrap(),
        total.parse().unwrap(),
    )
}

/// An account's balance, read off the log.
fn balance(gateway: &Gateway, id: u64) -> u64 {
    let body = format!(r#"[{{"Get": {{"id": {id}}}}}]"#);
    let (status, value) = gateway.post("/v1/reads", &body, Some(TOKEN), &[]);
    assert_eq!(status, 200, "{value}");
    value[0]["output"]["Account"]["balance"]
        .as_u64()
        .expect("a balance")
}

/// Proves commands and reads answer with their outcomes in order, each the handler's output
/// or its typed error, in the JSON the issue spells.
#[test]
fn commands_and_reads_answer_with_their_outcomes() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, _) = start_cluster(dir.path(), |_| {});
    let gateway = Gateway::start(dir.path(), &nodes.cluster_file, "gateway");
    let opened = gateway.commands(
        r#"[{"Open": {"id": 7, "balance": 100, "flags": 0}},
            {"Open": {"id": 8, "balance": 0, "flags": 0}},
            {"Open": {"id": 7, "balance": 5, "flags": 0}}]"#,
        &[],
    );
    assert_eq!(opened[0]["outcome"], "done", "{opened}");
    assert_eq!(opened[0]["output"]["Account"]["balance"], 100, "{opened}");
    assert_eq!(opened[2]["outcome"], "failed", "{opened}");
    let moved = gateway.commands(r#"[{"Transfer": {"from": 7, "to": 8, "amount": 5}}]"#, &[]);
    assert_eq!(
        moved[0],
        json!({"outcome": "done", "output": {"Transferred": {"from_balance": 95, "to_balance": 5}}})
    );
    assert_eq!((balance(&gateway, 7), balance(&gateway, 8)), (95, 5));
    assert_eq!(audit(&gateway), (2, 100));
    assert_client_and_gateway_agree(&gateway, &nodes.cluster_file);
}

/// The JSON type of a value: what a caller in another language branches on.
fn json_type(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// `runner client` with `args` on `cluster_file`: its JSON outcome.
fn runner_client(cluster_file: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_runner"))
        .arg("client")
        .arg("--cluster")
        .arg(cluster_file)
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{args:?}: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout).unwrap()
}

/// Proves `runner client` and the gateway give each field of the same outcomes the same JSON
/// type (the audit's `u128` total a string in both, the `u64` figures numbers in both):
/// the audit, an account, a transfer and a refusal.
fn assert_client_and_gateway_agree(gateway: &Gateway, cluster_file: &std::path::Path) {
    let body = r#"["Audit", {"Get": {"id": 7}}, {"Get": {"id": 9}}]"#;
    let (status, read) = gateway.post("/v1/reads", body, Some(TOKEN), &[]);
    assert_eq!(status, 200, "{read}");
    let moved = gateway.commands(r#"[{"Transfer": {"from": 8, "to": 7, "amount": 1}}]"#, &[]);
    let client = [
        (runner_client(cluster_file, &["audit"]), &read[0], "Audit"),
        (
            runner_client(cluster_file, &["get", "7"]),
            &read[1],
            "Account",
        ),
        (
            runner_client(cluster_file, &["transfer", "8", "7", "1"]),
            &moved[0],
            "Transferred",
        ),
    ];
    for (client, gateway, variant) in client {
        assert_eq!(client["outcome"], gateway["outcome"], "{client} {gateway}");
        let fields = client["output"].as_object().expect("an output object");
        let theirs = &gateway["output"][variant];
        for (name, value) in fields {
            assert_eq!(
                json_type(value),
                json_type(&theirs[name]),
                "{variant}.{name}: client {client}, gateway {gateway}"
            );
        }
    }
    let refused = runner_client(cluster_file, &["--allow-refused", "get", "9"]);
    assert_eq!(refused["error"], read[2]["error"], "{refused} {read}");
    let (client_total, gateway_total) = (
        runner_client(cluster_file, &["audit"])["output"]["total"].clone(),
        read[0]["output"]["Audit"]["total"].clone(),
    );
    assert_eq!(client_total, gateway_total, "the same total, the same JSON");
}

/// A bad request and what it must get.
struct Bad {
    path: &'static str,
    body: &'static str,
    token: Option<&'static str>,
    headers: &'static [&'static str],
    status: u16,
    code: &'static str,
}

const TRANSFER: &str = r#"[{"Transfer": {"from": 7, "to": 8, "amount": 5}}]"#;
const NO_AMOUNT: &str = r#"[{"Transfer": {"from": 7, "to": 8}}]"#;
const UNKNOWN: &str = r#"[{"Steal": {"id": 7}}]"#;
/// A field the Bank's transfer does not have, after a command that is right: nothing runs.
const MEMO: &str = r#"[{"Deposit": {"id": 8, "amount": 1}},
    {"Transfer": {"from": 7, "to": 8, "amount": 1, "memo": "x"}}]"#;
/// 2^64, one past `u64::MAX`.
const TOO_LARGE: &str = r#"[{"Transfer": {"from": 7, "to": 8, "amount": 18446744073709551616}}]"#;
const NEGATIVE: &str = r#"[{"Transfer": {"from": 7, "to": 8, "amount": -1}}]"#;

const fn bad(path: &'static str, body: &'static str, status: u16, code: &'static str) -> Bad {
    Bad {
        path,
        body,
        token: Some(TOKEN),
        headers: &[],
        status,
        code,
    }
}

/// Checks the refusals of a field the type lacks and of integers out of range name the
/// field's path and the value as sent.
fn assert_refusals_name_the_field(gateway: &Gateway) {
    let named = [
        (
            MEMO,
            "unknown field `memo` at [1].Transfer.memo",
            "[1].Transfer.memo",
        ),
        (
            TOO_LARGE,
            "18446744073709551616 is out of range for u64 at [0].Transfer.amount",
            "[0].Transfer.amount",
        ),
        (
            NEGATIVE,
            "-1 is out of range for u64 at [0].Transfer.amount",
            "[0].Transfer.amount",
        ),
    ];
    for (body, message, path) in named {
        let (_, value) = gateway.post("/v1/commands", body, Some(TOKEN), &[]);
        assert_eq!(value["path"], path, "{body}: {value}");
        let said = value["message"].as_str().unwrap();
        assert!(said.contains(message), "{body}: {value}");
    }
}

/// Proves each kind of bad request gets its status and a JSON body that says why (the
/// parser's message, the wrong field's path), and that none of them changes the cluster.
#[test]
fn bad_requests_get_their_status_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, _) = start_cluster(dir.path(), |_| {});
    let gateway = Gateway::start(dir.path(), &nodes.cluster_file, "gateway");
    gateway.commands(
        r#"[{"Open": {"id": 7, "balance": 100, "flags": 0}},
            {"Open": {"id": 8, "balance": 0, "flags": 0}}]"#,
        &[],
    );
    let cases = [
        bad("/v1/commands", "[{", 400, "bad_body"),
        bad("/v1/commands", MEMO, 400, "bad_body"),
        bad("/v1/commands", TOO_LARGE, 400, "bad_body"),
        bad("/v1/commands", NEGATIVE, 400, "bad_body"),
        bad("/v1/commands", UNKNOWN, 400, "bad_body"),
        bad("/v1/commands", NO_AMOUNT, 400, "bad_body"),
        bad("/v1/commands", "[]", 400, "command_count"),
        bad("/v1/reads", TRANSFER, 400, "not_read_only"),
        Bad {
            token: None,
            ..bad("/v1/commands", TRANSFER, 401, "unauthorized")
        },
        Bad {
            token: Some("another"),
            ..bad("/v1/commands", TRANSFER, 401, "unauthorized")
        },
        Bad {
            headers: &["Idempotency-Key: "],
            ..bad("/v1/commands", TRANSFER, 400, "bad_idempotency_key")
        },
    ];
    for case in cases {
        let (got, value) = gateway.post(case.path, case.body, case.token, case.headers);
        let code = value["error"].as_str();
        assert_eq!(
            (got, code),
            (case.status, Some(case.code)),
            "{}: {value}",
            case.body
        );
        assert!(
            value["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{value}"
        );
    }
    let (_, value) = gateway.post("/v1/commands", UNKNOWN, Some(TOKEN), &[]);
    assert!(
        value["message"].as_str().unwrap().contains("Steal"),
        "{value}"
    );
    let (_, value) = gateway.post("/v1/commands", NO_AMOUNT, Some(TOKEN), &[]);
    assert_eq!(value["path"], "[0].Transfer", "the field's path: {value}");
    assert_refusals_name_the_field(&gateway);
    assert_oversized_is_refused(&gateway);
    assert_eq!(audit(&gateway), (2, 100), "nothing changed");
    assert_eq!(
        (balance(&gateway, 7), balance(&gateway, 8)),
        (100, 0),
        "no money moved"
    );
}

/// A body announced over the limit is refused (413) before it is read.
fn assert_oversized_is_refused(gateway: &Gateway) {
    let oversized = format!(
        "POST /v1/commands HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\
         Authorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n[",
        engine::cli::gateway::GATEWAY_BODY_BYTES_MAX + 1
    );
    let (status, text) = exchange(&gateway.address, oversized.as_bytes()).unwrap();
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("too_large"), "{text}");
    let long_head = format!(
        "POST /v1/commands HTTP/1.1\r\nHost: gateway\r\nX-Long: {}\r\n\r\n",
        "a".repeat(engine::cli::gateway::GATEWAY_HEADER_BYTES_MAX)
    );
    let (status, _) = exchange(&gateway.address, long_head.as_bytes()).unwrap();
    assert_eq!(status, 431, "a head over the limit");
    let many = (0..=engine::cli::gateway::GATEWAY_HEADERS_MAX)
        .map(|i| format!("X-Field-{i}: 1\r\n"))
        .collect::<String>();
    let many_fields = format!("POST /v1/commands HTTP/1.1\r\nHost: gateway\r\n{many}\r\n");
    let (status, _) = exchange(&gateway.address, many_fields.as_bytes()).unwrap();
    assert_eq!(status, 431, "more header fields than the limit");
}

/// Proves a caller that starts a request's head and never finishes it, and one that connects
/// and sends nothing at all, are cut off once `GATEWAY_HEADER_READ_S` has passed, not before:
/// each holds a connection, nothing more.
#[test]
fn a_caller_slow_to_send_its_head_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, _) = start_cluster(dir.path(), |_| {});
    let gateway = Gateway::start(dir.path(), &nodes.cluster_file, "gateway");
    let limit = std::time::Duration::from_secs(engine::cli::gateway::GATEWAY_HEADER_READ_S);
    let silent = {
        let address = gateway.address.clone();
        std::thread::spawn(move || {
            let started = std::time::Instant::now();
            let answer = exchange(&address, b"").unwrap();
            (answer, started.elapsed())
        })
    };
    let started = std::time::Instant::now();
    let (status, _) = exchange(&gateway.address, b"POST /v1/commands HTTP/1.1\r\nHost: g").unwrap();
    assert!(
        started.elapsed() >= limit,
        "cut after {:?}",
        started.elapsed()
    );
    assert!(status == 0 || status == 408, "status {status}");
    let ((status, _), waited) = silent.join().unwrap();
    assert!(waited >= limit, "a silent caller cut after {waited:?}");
    assert_eq!(status, 0, "a silent caller gets no answer");
    assert_eq!(gateway.get("/livez").0, 200, "the gateway still serves");
}

/// Proves an idempotency key runs its commands once: a retry through a second gateway, after
/// the first one is killed, gets the first answer and moves no money again; the same key with
/// another body is refused (422) and runs nothing.
#[test]
fn a_key_runs_once_across_gateways() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, _) = start_cluster(dir.path(), |_| {});
    let first = Gateway::start(dir.path(), &nodes.cluster_file, "first");
    first.commands(
        r#"[{"Open": {"id": 7, "balance": 100, "flags": 0}}, {"Open": {"id": 8, "balance": 0, "flags": 0}}]"#,
        &[],
    );
    let transfer = TRANSFER;
    let key = "Idempotency-Key: order-4711";
    let answered = first.commands(transfer, &[key]);
    drop(first);
    let second = Gateway::start(dir.path(), &nodes.cluster_file, "second");
    assert_eq!(
        second.commands(transfer, &[key]),
        answered,
        "the first answer again"
    );
    assert_eq!(
        (balance(&second, 7), balance(&second, 8)),
        (95, 5),
        "moved once"
    );
    let other = r#"[{"Transfer": {"from": 7, "to": 8, "amount": 6}}]"#;
    let (status, value) = second.post("/v1/commands", other, Some(TOKEN), &[key]);
    assert_eq!(
        (status, value["error"].as_str()),
        (422, Some("idempotency_key_reused"))
    );
    assert_eq!(
        (balance(&second, 7), balance(&second, 8)),
        (95, 5),
        "nothing ran"
    );
    let fresh = second.commands(transfer, &["Idempotency-Key: order-4712"]);
    assert_eq!(
        fresh[0]["output"]["Transferred"]["from_balance"], 90,
        "{fresh}"
    );
}

/// Proves keyed requests ride the gateway's pooled connections: a key's commands travel in
/// the pooled sessions' requests, so forty keys open a handful of client connections in all
/// (the pool's and the readiness probe's), not one or two per key.
#[test]
fn keyed_requests_share_the_gateways_connections() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = engine::node::local::free_loopback_addresses(3).unwrap();
    let metrics: Vec<_> = metrics
        .iter()
        .map(|a| a.peer_address.socket_addr().expect("numeric"))
        .collect();
    let (nodes, _) = start_cluster(dir.path(), |file| {
        for (node, address) in file.nodes.iter_mut().zip(&metrics) {
            node.metrics_address = Some(*address);
        }
    });
    let gateway = Gateway::start(dir.path(), &nodes.cluster_file, "gateway");
    gateway.commands(r#"[{"Open": {"id": 7, "balance": 1000, "flags": 0}}, {"Open": {"id": 8, "balance": 0, "flags": 0}}]"#, &[]);
    let before = client_connections(&metrics);
    const KEYS: u64 = 40;
    for key in 0..KEYS {
        let answered = gateway.commands(TRANSFER, &[&format!("Idempotency-Key: pool-{key}")]);
        assert_eq!(answered[0]["outcome"], "done", "{answered}");
    }
    assert_eq!(balance(&gateway, 8), 5 * KEYS, "each key ran once");
    let opened = client_connections(&metrics) - before;
    assert!(
        opened < KEYS / 4,
        "{opened} client connections for {KEYS} keys"
    );
}

/// Proves a key the cluster no longer keeps is answered 410 and runs nothing: with
/// `sessions_max = 16`, forty newer keys push an old one out of the keys the cluster keeps.
#[test]
fn a_forgotten_key_is_answered_gone() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, _) = start_cluster(dir.path(), |file| file.sessions_max = 16);
    let gateway = Gateway::start(dir.path(), &nodes.cluster_file, "gateway");
    gateway.commands(r#"[{"Open": {"id": 7, "balance": 1000, "flags": 0}}, {"Open": {"id": 8, "balance": 0, "flags": 0}}]"#, &[]);
    let old = "Idempotency-Key: old";
    gateway.commands(TRANSFER, &[old]);
    for key in 0..40 {
        gateway.commands(TRANSFER, &[&format!("Idempotency-Key: newer-{key}")]);
    }
    let (status, value) = gateway.post("/v1/commands", TRANSFER, Some(TOKEN), &[old]);
    assert_eq!(
        (status, value["error"].as_str()),
        (410, Some("idempotency_key_expired")),
        "{value}"
    );
    assert_eq!(
        balance(&gateway, 8),
        5 * 41,
        "the old key ran once, not again"
    );
}

/// Proves keyed requests batch like any other: keyed callers arriving together (the gateway
/// lingers for company) leave in fewer engine requests than there are callers, each key runs
/// once, and every caller sending its key again gets its own first answer.
#[test]
fn keyed_requests_batch_and_each_key_runs_once() {
    const CALLERS: u64 = 32;
    let dir = tempfile::tempdir().unwrap();
    let (nodes, _) = start_cluster(dir.path(), |_| {});
    let linger = ["--linger-us", "50000"];
    let gateway = Gateway::start_with(dir.path(), &nodes.cluster_file, "gateway", &linger);
    gateway.commands(r#"[{"Open": {"id": 7, "balance": 100000, "flags": 0}}, {"Open": {"id": 8, "balance": 0, "flags": 0}}]"#, &[]);
    let formed_before = batches(&gateway);
    let send_all = |gateway: &Gateway| {
        let barrier = std::sync::Barrier::new(CALLERS as usize);
        std::thread::scope(|scope| {
            let callers: Vec<_> = (1..=CALLERS)
                .map(|n| {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        let body =
                            format!(r#"[{{"Transfer": {{"from": 7, "to": 8, "amount": {n}}}}}]"#);
                        barrier.wait();
                        gateway.commands(&body, &[&format!("Idempotency-Key: batch-{n}")])
                    })
                })
                .collect();
            callers
                .into_iter()
                .map(|c| c.join().unwrap())
                .collect::<Vec<_>>()
        })
    };
    let first = send_all(&gateway);
    let (formed, carried) = batches(&gateway);
    let (formed, carried) = (formed - formed_before.0, carried - formed_before.1);
    assert_eq!(
        carried, CALLERS,
        "every keyed command rode a formed request"
    );
    assert!(
        formed < CALLERS,
        "{CALLERS} keyed callers in {formed} engine requests"
    );
    let moved: u64 = (1..=CALLERS).sum();
    assert_eq!(balance(&gateway, 8), moved, "each key ran once");
    for (n, answer) in first.iter().enumerate() {
        let to_balance = &answer[0]["output"]["Transferred"]["to_balance"];
        assert!(to_balance.as_u64().is_some(), "caller {n}: {answer}");
    }
    assert_eq!(
        send_all(&gateway),
        first,
        "every caller gets its own first answer again"
    );
    assert_eq!(balance(&gateway, 8), moved, "nothing ran twice");
}

/// Engine requests the gateway formed so far and the commands they carried, from its metrics.
fn batches(gateway: &Gateway) -> (u64, u64) {
    let (status, text) = gateway.get("/metrics");
    assert_eq!(status, 200, "{text}");
    let value = |name: &str| -> f64 {
        let line = (text.lines())
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {text}"));
        line.split_whitespace().last().unwrap().parse().unwrap()
    };
    let count = value("gateway_batch_commands_count");
    (count as u64, value("gateway_batch_commands_sum") as u64)
}

/// Client connections the nodes have accepted, from their metrics.
fn client_connections(metrics: &[std::net::SocketAddr]) -> u64 {
    let mut total = 0;
    for address in metrics {
        let request = b"GET /metrics HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n";
        let (status, text) = exchange(&address.to_string(), request).unwrap();
        assert_eq!(status, 200, "{text}");
        let line = text
            .lines()
            .find(|l| l.starts_with("engine_connections_total{handler=\"bank\",kind=\"client\"}"));
        total += line.map_or(0, |l| l.split_whitespace().last().unwrap().parse().unwrap());
    }
    total
}
