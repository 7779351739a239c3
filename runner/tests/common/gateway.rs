//! A `runner gateway` process for the tests, and a minimal HTTP/1.1 exchange to call it with.

use super::WAIT;
use engine::node::local::free_loopback_addresses;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The callers' token of the test gateways.
pub const TOKEN: &str = "the callers of a test gateway send this";

/// A gateway process; killed when dropped.
pub struct Gateway {
    child: Child,
    /// Where it listens (`127.0.0.1:PORT`).
    pub address: String,
    /// The file holding the callers' token.
    pub token_file: PathBuf,
}

impl Gateway {
    /// Starts `runner gateway` for the cluster of `cluster_file`, with the test token, and
    /// waits until it is ready (a leader answers).
    pub fn start(dir: &Path, cluster_file: &Path, name: &str) -> Gateway {
        Gateway::start_with(dir, cluster_file, name, &[])
    }

    /// [`Gateway::start`] with more options for `runner gateway`.
    pub fn start_with(dir: &Path, cluster_file: &Path, name: &str, options: &[&str]) -> Gateway {
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
            .args(options)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("runner gateway starts");
        let gateway = Gateway {
            child,
            address,
            token_file: token,
        };
        let started = Instant::now();
        while gateway.get("/readyz").0 != 200 {
            assert!(started.elapsed() < WAIT, "the gateway never became ready");
            std::thread::sleep(Duration::from_millis(50));
        }
        gateway
    }

    /// `GET path`: the status and body (0 when the gateway cannot be reached).
    pub fn get(&self, path: &str) -> (u16, String) {
        let request = format!("GET {path} HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n");
        exchange(&self.address, request.as_bytes()).unwrap_or((0, String::new()))
    }

    /// `POST path` with `body` and the token (unless `token` is None) and `headers`.
    pub fn post(
        &self,
        path: &str,
        body: &str,
        token: Option<&str>,
        headers: &[&str],
    ) -> (u16, Value) {
        post_to(&self.address, path, body, token, headers).expect("an answer")
    }

    /// `POST /v1/commands` with the token; the outcomes, checked to be a 200.
    pub fn commands(&self, body: &str, headers: &[&str]) -> Value {
        let (status, value) = self.post("/v1/commands", body, Some(TOKEN), headers);
        assert_eq!(status, 200, "{body}: {value}");
        value
    }
}

impl Gateway {
    /// Starts `runner gateway` for the cluster of `cluster_file` on `address`, with the test
    /// token and the `extra` options, and returns at once (it may not be ready, or may exit
    /// on its options). Its log is `dir/NAME.log`.
    pub fn spawn(
        dir: &Path,
        cluster_file: &Path,
        name: &str,
        address: &str,
        extra: &[&std::ffi::OsStr],
    ) -> Gateway {
        let token = dir.join("token");
        std::fs::write(&token, TOKEN).unwrap();
        std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_runner"))
            .args(["gateway", "--cluster"])
            .arg(cluster_file)
            .args(["--listen", address, "--token-file"])
            .arg(&token)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("runner gateway starts");
        Gateway {
            child,
            address: address.to_string(),
            token_file: token,
        }
    }

    /// The process's exit status, once it has ended; None while it runs.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }
}

/// `127.0.0.1:PORT` for the first port from `first` on (trying 100) that is free now: for
/// tests that keep their listeners in a port range of their own, below the kernel's
/// ephemeral ports.
pub fn free_port_from(first: u16) -> String {
    (first..first + 100)
        .map(|port| format!("127.0.0.1:{port}"))
        .find(|address| std::net::TcpListener::bind(address).is_ok())
        .unwrap_or_else(|| panic!("no free port from {first} on"))
}

impl Gateway {
    /// Stops the process (SIGSTOP): what it sent the cluster goes on, what it would answer
    /// waits.
    pub fn pause(&self) {
        let pid = self.child.id().to_string();
        let stopped = Command::new("kill").args(["-STOP", &pid]).status().unwrap();
        assert!(stopped.success(), "kill -STOP {pid}");
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `POST path` with `body`, the token (unless None) and `headers` to the gateway at
/// `address`: the status and the body's JSON; None when no answer came (the gateway is gone
/// or died while answering).
pub fn post_to(
    address: &str,
    path: &str,
    body: &str,
    token: Option<&str>,
    headers: &[&str],
) -> Option<(u16, Value)> {
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
    let (status, text) = exchange(address, request.as_bytes()).ok()?;
    if status == 0 {
        return None;
    }
    let value = serde_json::from_str(&text).unwrap_or_else(|_| json!({ "text": text }));
    Some((status, value))
}

/// One HTTP/1.1 exchange on a new connection (`Connection: close`): status and body.
pub fn exchange(address: &str, request: &[u8]) -> std::io::Result<(u16, String)> {
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
