//! A node's HTTP endpoints on its metrics address, asked as a supervisor or Prometheus asks.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Longest a poll of the endpoints waits for what it expects.
pub const POLL: Duration = Duration::from_secs(60);

/// One request: the status code and the body (`Connection: close` ends the exchange).
pub fn request(address: SocketAddr, method: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let head = format!("{method} {path} HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Some((status, body))
}

/// Polls `path` on `address` until `want` holds of the answer; the last answer.
pub fn poll(address: SocketAddr, path: &str, want: impl Fn(u16, &str) -> bool) -> (u16, String) {
    let deadline = Instant::now() + POLL;
    loop {
        let answer = request(address, "GET", path);
        if let Some((status, body)) = &answer
            && want(*status, body)
        {
            return (*status, body.clone());
        }
        assert!(
            Instant::now() < deadline,
            "{address}{path}: last answer {answer:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
