//! `runner gateway` over real processes: three nodes and gateways, called over HTTP/1.1 on
//! TCP. Commands and reads answer with their outcomes; every kind of bad request gets its
//! status and leaves the cluster unchanged; an idempotency key runs its commands once, even
//! when the gateway that took the first attempt is gone and the retry reaches another.

mod common;

use common::{WAIT, start_cluster};
use engine::node::local::free_loopback_addresses;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The callers' token of the test gateways.
const TOKEN: &str = "the callers of a test gateway send this";

/// A gateway process; killed when dropped.
struct Gateway {
    child: Child,
    address: String,
}

impl Gateway {
    /// Starts `runner gateway` for the cluster of `cluster_file`, with the test token, and
    /// waits until it is ready (a leader answers).
    fn start(dir: &Path, cluster_file: &Path, name: &str) -> Gateway {
        let token = dir.join("token");
        std::fs::write(&token, TOKEN).unwrap();
        std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let address = free_loopback_addresses(1).unwrap()[0]
            .client_address
            .to_string();
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_runner"))
            .args(["gateway", "--cluster"])
            .arg(cluster_file)
            .args(["--listen", &address, "--token-file"])
            .arg(&token)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("runner gateway starts");
        let gateway = Gateway { child, address };
        let started = Instant::now();
        while gateway.get("/readyz").0 != 200 {
            assert!(started.elapsed() < WAIT, "the gateway never became ready");
            std::thread::sleep(Duration::from_millis(50));
        }
        gateway
    }

    /// `GET path`: the status and body (0 when the gateway cannot be reached).
    fn get(&self, path: &str) -> (u16, String) {
        let request = format!("GET {path} HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n");
        exchange(&self.address, request.as_bytes()).unwrap_or((0, String::new()))
    }

    /// `POST path` with `body` and the token (unless `token` is None) and `headers`.
    fn post(&self, path: &str, body: &str, token: Option<&str>, headers: &[&str]) -> (u16, Value) {
        let mut request = format!(
            "POST {path} HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        );
        if let Some(token) = token {
            request.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        for header in headers {
            request.push_str(&format!("{header}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(body);
        let (status, text) = exchange(&self.address, request.as_bytes()).expect("an answer");
        let value = serde_json::from_str(&text).unwrap_or_else(|_| json!({ "text": text }));
        (status, value)
    }

    /// `POST /v1/commands` with the token; the outcomes, checked to be a 200.
    fn commands(&self, body: &str, headers: &[&str]) -> Value {
        let (status, value) = self.post("/v1/commands", body, Some(TOKEN), headers);
        assert_eq!(status, 200, "{body}: {value}");
        value
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 exchange on a new connection (`Connection: close`): status and body.
fn exchange(address: &str, request: &[u8]) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(WAIT))?;
    stream.write_all(request)?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_string()))
}

/// The audit's accounts and total, read off the log.
fn audit(gateway: &Gateway) -> (u64, u64) {
    let (status, value) = gateway.post("/v1/reads", r#"["Audit"]"#, Some(TOKEN), &[]);
    assert_eq!(status, 200, "{value}");
    let figures = &value[0]["output"]["Audit"];
    (
        figures["accounts"].as_u64().unwrap(),
        figures["total"].as_u64().unwrap(),
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

/// Proves each kind of bad request gets its status and a JSON body that says why (the
/// parser's message, the wrong field's path), and that none of them changes the cluster.
#[test]
fn bad_requests_get_their_status_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, _) = start_cluster(dir.path(), |_| {});
    let gateway = Gateway::start(dir.path(), &nodes.cluster_file, "gateway");
    gateway.commands(r#"[{"Open": {"id": 7, "balance": 100, "flags": 0}}]"#, &[]);
    let cases = [
        bad("/v1/commands", "[{", 400, "bad_body"),
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
    assert_oversized_is_refused(&gateway);
    assert_eq!(audit(&gateway), (1, 100), "nothing changed");
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
