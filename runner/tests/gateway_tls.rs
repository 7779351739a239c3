//! `runner gateway` with TLS on its listener, over real processes (three nodes, a gateway)
//! and curl as the caller, with certificates made by the runbook's openssl script: TLS
//! callers get committed outcomes over HTTP/2 and HTTP/1.1, a caller in clear and a stalled
//! handshake get nothing and block no one, mutual TLS refuses callers without a certificate of
//! its CA at the handshake, and bad options stop the gateway with a clear message.

mod common;

use common::gateway::{Gateway, TOKEN, exchange, free_port_from};
use common::{WAIT, certificate, start_cluster, until, write_cluster_file};
use engine::cli::gateway::GATEWAY_TLS_HANDSHAKE_S;
use serde_json::Value;
use std::ffi::OsStr;
use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Seconds curl may take for one exchange: a committed request on a busy machine, with room.
const CURL_MAX_S: u64 = 30;
const OPEN: &str = r#"[{"Open": {"id": 7, "balance": 100, "flags": 0}},
                       {"Open": {"id": 8, "balance": 0, "flags": 0}}]"#;
const TRANSFER: &str = r#"[{"Transfer": {"from": 7, "to": 8, "amount": 5}}]"#;

/// Fails the test when curl is missing: these tests call the gateway with it.
fn curl_is_installed() {
    let version = Command::new("curl").arg("--version").output();
    assert!(
        version.is_ok_and(|v| v.status.success()),
        "curl is needed by these tests (apt-get install curl)"
    );
}

/// The files of `dir/tls`: the CA, the gateway's certificate for 127.0.0.1, a caller's
/// certificate of the same CA, and a caller's certificate of another CA.
struct Certs {
    ca: PathBuf,
    gateway: (PathBuf, PathBuf),
    caller: (PathBuf, PathBuf),
    stranger: (PathBuf, PathBuf),
}

fn certs(dir: &Path) -> Certs {
    let tls = dir.join("tls");
    let rogue = dir.join("rogue");
    certificate(&tls, "gateway", &["127.0.0.1"]);
    certificate(&tls, "caller", &[]);
    certificate(&rogue, "stranger", &[]);
    let pair = |dir: &Path, name: &str| {
        (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        )
    };
    Certs {
        ca: tls.join("ca.pem"),
        gateway: pair(&tls, "gateway"),
        caller: pair(&tls, "caller"),
        stranger: pair(&rogue, "stranger"),
    }
}

/// What curl got: whether it succeeded, the HTTP status (0: none) and version, the body, and
/// curl's error text.
#[derive(Debug)]
struct Answer {
    ok: bool,
    status: u16,
    version: String,
    body: String,
    error: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|_| panic!("JSON: {self:?}"))
    }
}

/// A caller: the CA it trusts and the certificate it presents, if any.
struct Caller<'a> {
    ca: &'a Path,
    identity: Option<&'a (PathBuf, PathBuf)>,
}

impl Caller<'_> {
    /// curl on `https://ADDRESS/PATH` with `extra` options (a POST when `body` is given, with
    /// the test token).
    fn curl(&self, address: &str, path: &str, body: Option<&str>, extra: &[&str]) -> Answer {
        let mut command = Command::new("curl");
        command
            .args(["--silent", "--show-error", "--max-time"])
            .arg(CURL_MAX_S.to_string())
            .arg("--cacert")
            .arg(self.ca)
            .args(["--write-out", "\n%{http_code} %{http_version}"]);
        if let Some((cert, key)) = self.identity {
            command.arg("--cert").arg(cert).arg("--key").arg(key);
        }
        if let Some(body) = body {
            command
                .args(["--header", "Content-Type: application/json"])
                .args(["--data-binary", body]);
        }
        let out = command
            .args(extra)
            .arg(format!("https://{address}{path}"))
            .output()
            .expect("curl runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, written) = stdout.rsplit_once('\n').expect("curl's --write-out");
        let (status, version) = written.split_once(' ').expect("code and version");
        Answer {
            ok: out.status.success(),
            status: status.parse().unwrap_or(0),
            version: version.to_string(),
            body: body.to_string(),
            error: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// POST `body` to `/v1/commands` with the token: the outcomes, checked to be a 200 in
    /// `version` of HTTP.
    fn commands(&self, address: &str, body: &str, extra: &[&str], version: &str) -> Value {
        let bearer = format!("Authorization: Bearer {TOKEN}");
        let mut extra = extra.to_vec();
        extra.extend(["--header", &bearer]);
        let answer = self.curl(address, "/v1/commands", Some(body), &extra);
        assert_eq!(
            (answer.status, answer.version.as_str()),
            (200, version),
            "{answer:?}"
        );
        answer.json()
    }

    /// Waits until the gateway answers `/readyz` with 200 to this caller.
    fn wait_ready(&self, gateway: &mut Gateway, log: &Path) {
        let started = Instant::now();
        while self.curl(&gateway.address, "/readyz", None, &[]).status != 200 {
            let ended = gateway.exited();
            let text = std::fs::read_to_string(log).unwrap_or_default();
            assert!(ended.is_none(), "the gateway exited ({ended:?}): {text}");
            assert!(
                started.elapsed() < WAIT,
                "the gateway never became ready: {text}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The gateway's options for the TLS of `certs`; with `--tls-client-ca-file` when `mutual`.
fn tls_options(certs: &Certs, mutual: bool) -> Vec<&OsStr> {
    let mut options = vec![
        OsStr::new("--tls-cert-file"),
        certs.gateway.0.as_os_str(),
        OsStr::new("--tls-key-file"),
        certs.gateway.1.as_os_str(),
    ];
    if mutual {
        options.extend([OsStr::new("--tls-client-ca-file"), certs.ca.as_os_str()]);
    }
    options
}

/// Proves a TLS gateway serves TLS callers committed outcomes over HTTP/2 (chosen by ALPN)
/// and HTTP/1.1; that a connection whose handshake never starts holds up no one and is closed
/// after `GATEWAY_TLS_HANDSHAKE_S`; and that a caller in clear gets no HTTP answer.
#[test]
fn a_tls_gateway_serves_tls_callers_and_no_one_in_clear() {
    curl_is_installed();
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let certs = certs(dir);
    let (nodes, _) = start_cluster(dir, |_| {});
    let address = free_port_from(27_300);
    let options = tls_options(&certs, false);
    let mut gateway = Gateway::spawn(dir, &nodes.cluster_file, "gateway", &address, &options);
    let log = dir.join("gateway.log");
    let caller = Caller {
        ca: &certs.ca,
        identity: None,
    };
    caller.wait_ready(&mut gateway, &log);
    // A connection that never says a word: the next caller is served at once all the same.
    let mut stalled = TcpStream::connect(&address).unwrap();
    let livez = ["--max-time", "5"];
    let live = caller.curl(&address, "/livez", None, &livez);
    assert_eq!((live.status, live.body.as_str()), (200, "ok\n"), "{live:?}");
    let opened = caller.commands(&address, OPEN, &[], "2");
    assert_eq!(opened[0]["outcome"], "done", "{opened}");
    assert_eq!(opened[1]["output"]["Account"]["balance"], 0, "{opened}");
    let moved = caller.commands(&address, TRANSFER, &["--http1.1"], "1.1");
    let transferred = &moved[0]["output"]["Transferred"];
    assert_eq!(transferred["from_balance"], 95, "{moved}");
    assert_eq!(transferred["to_balance"], 5, "{moved}");
    // In clear: the gateway reads no HTTP, so no HTTP comes back.
    let request = b"GET /livez HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n";
    let plain = exchange(&address, request);
    assert!(
        !matches!(plain, Ok((status, _)) if status != 0),
        "{plain:?}"
    );
    let logged = |what: &str| std::fs::read_to_string(&log).unwrap().contains(what);
    let runtime = common::runtime();
    runtime.block_on(until("the refusal in clear logged", || {
        logged("connection refused: TLS failed")
    }));
    // The stalled connection is closed once its handshake has had its time.
    let limit = Duration::from_secs(GATEWAY_TLS_HANDSHAKE_S);
    stalled.set_read_timeout(Some(limit * 3)).unwrap();
    let read = stalled.read(&mut [0; 1]);
    assert!(matches!(read, Ok(0)) || read.is_err_and(is_reset), "closed");
    runtime.block_on(until("the slow handshake logged", || {
        logged("TLS handshake too slow")
    }));
}

/// True for the errors of a connection the other side closed (not a timeout).
fn is_reset(error: std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        error.kind(),
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe
    )
}

/// Proves that with `--tls-client-ca-file` a caller without a certificate, and one whose
/// certificate another CA signed, are refused at the handshake (no HTTP status, logged), while
/// a caller with a certificate of the CA is served; and that the bearer token is still
/// checked for it (both are required when both are set).
#[test]
fn mutual_tls_serves_only_callers_with_a_certificate_of_its_ca() {
    curl_is_installed();
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let certs = certs(dir);
    let (nodes, _) = start_cluster(dir, |_| {});
    let address = free_port_from(27_400);
    let options = tls_options(&certs, true);
    let mut gateway = Gateway::spawn(dir, &nodes.cluster_file, "gateway", &address, &options);
    let log = dir.join("gateway.log");
    let caller = Caller {
        ca: &certs.ca,
        identity: Some(&certs.caller),
    };
    caller.wait_ready(&mut gateway, &log);
    let refused = [None, Some(&certs.stranger)];
    for identity in refused {
        let stranger = Caller {
            ca: &certs.ca,
            identity,
        };
        let answer = stranger.curl(&address, "/livez", None, &[]);
        assert!(!answer.ok && answer.status == 0, "{identity:?}: {answer:?}");
        assert!(!answer.error.is_empty(), "curl says why: {answer:?}");
    }
    let opened = caller.commands(&address, OPEN, &[], "2");
    assert_eq!(opened[0]["outcome"], "done", "{opened}");
    // Over HTTP/1.1: a 401 is sent before the body is read, and curl 7.88 takes the
    // RST_STREAM(NO_ERROR) that then ends the HTTP/2 stream for an error now and then (it
    // does so in clear too).
    let no_token = caller.curl(&address, "/v1/commands", Some(TRANSFER), &["--http1.1"]);
    assert_eq!(no_token.status, 401, "{no_token:?}");
    assert_eq!(no_token.json()["error"], "unauthorized", "{no_token:?}");
    let moved = caller.commands(&address, TRANSFER, &["--http1.1"], "1.1");
    assert_eq!(moved[0]["outcome"], "done", "{moved}");
    let text = std::fs::read_to_string(&log).unwrap();
    let refusals = text.matches("connection refused: TLS failed").count();
    assert!(refusals >= 2, "both refusals logged: {text}");
}

/// Proves each bad combination or bad file of the TLS options stops the gateway before it
/// serves, with a non-zero exit and a message that names the problem.
#[test]
fn bad_tls_options_stop_the_gateway_with_a_clear_message() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let certs = certs(dir);
    let (cluster_file, _) = write_cluster_file(dir, |_| {});
    let open_key = dir.join("open.key");
    std::fs::copy(&certs.gateway.1, &open_key).unwrap();
    std::fs::set_permissions(
        &open_key,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let (cert, key, ca) = (&certs.gateway.0, &certs.gateway.1, &certs.ca);
    let missing = dir.join("missing.pem");
    let (c, k, a) = ("--tls-cert-file", "--tls-key-file", "--tls-client-ca-file");
    let cases: [(&[(&str, &Path)], &str); 7] = [
        (&[(c, cert)], "needs --tls-key-file"),
        (&[(k, key)], "needs --tls-cert-file"),
        (&[(a, ca)], "--tls-client-ca-file needs --tls-cert-file"),
        (&[(c, cert), (k, &open_key)], "may be read by other users"),
        (&[(c, &missing), (k, key)], "missing.pem"),
        (
            &[(c, cert), (k, &certs.caller.1)],
            "caller.key and tls_cert_file",
        ),
        (&[(c, cert), (k, key), (a, key)], "tls_client_ca_file"),
    ];
    for (number, (pairs, message)) in cases.into_iter().enumerate() {
        let options: Vec<&OsStr> = pairs
            .iter()
            .flat_map(|(flag, path)| [OsStr::new(flag), path.as_os_str()])
            .collect();
        let address = free_port_from(27_500);
        let name = format!("bad{number}");
        let mut gateway = Gateway::spawn(dir, &cluster_file, &name, &address, &options);
        let started = Instant::now();
        let status = loop {
            if let Some(status) = gateway.exited() {
                break status;
            }
            assert!(started.elapsed() < WAIT, "{options:?}: the gateway went on");
            std::thread::sleep(Duration::from_millis(20));
        };
        let text = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap();
        assert!(!status.success(), "{options:?}: {text}");
        assert!(text.contains(message), "{options:?}: {message:?} in {text}");
    }
}
