//! The node's HTTP endpoints on its metrics address, on hyper's HTTP/1.1 server:
//! `/livez` (the event loop answers), `/readyz` (the node can serve), `/metrics`
//! (Prometheus). `GET` and `HEAD` on each; everything is read from the figures the driver
//! last published ([`Board`]), never asked of the driver.

use super::metrics::NodeMetrics;
use super::probe::{self, Board, NotReady};
use super::process::ProcessFigures;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Most bytes of a request head (hyper's smallest read buffer).
pub const HTTP_HEAD_BYTES_MAX: usize = 8 * 1024;

/// Longest a connection may take to send a request head, in milliseconds.
pub const HTTP_HEAD_READ_MS: u64 = 2_000;

/// Connections served at once; more are closed as they arrive.
pub const HTTP_CONNECTIONS_MAX: usize = 64;

/// Pause after a failed `accept` (descriptors exhausted, say) before the next, in
/// milliseconds: a failing accept must not spin.
pub const HTTP_ACCEPT_RETRY_MS: u64 = 100;

/// Longest a connection is kept, whatever it does, in milliseconds: a caller that sends
/// requests and never reads the answers gives its place back.
pub const HTTP_CONNECTION_MS_MAX: u64 = 10_000;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What every connection's requests are answered from.
#[derive(Clone)]
pub(super) struct Endpoints {
    pub(super) board: Board,
    pub(super) metrics: NodeMetrics,
    pub(super) data_dir: PathBuf,
}

/// Serves the endpoints on `listener` until the node's runtime stops.
pub(super) async fn serve(listener: TcpListener, endpoints: Endpoints) {
    let room = Arc::new(Semaphore::new(HTTP_CONNECTIONS_MAX));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!(%error, "metrics address: accept failed");
                tokio::time::sleep(Duration::from_millis(HTTP_ACCEPT_RETRY_MS)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&room).try_acquire_owned() else {
            tracing::debug!("metrics address: too many connections, one closed");
            continue;
        };
        let endpoints = endpoints.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let endpoints = endpoints.clone();
                async move { Ok::<_, Infallible>(endpoints.answer(&request).await) }
            });
            // One request a connection (probes and scrapes open one each): no caller keeps
            // a connection, and with it a place, by pipelining requests it never reads.
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_millis(HTTP_HEAD_READ_MS))
                .max_buf_size(HTTP_HEAD_BYTES_MAX)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            let limit = Duration::from_millis(HTTP_CONNECTION_MS_MAX);
            match tokio::time::timeout(limit, connection).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::debug!(%error, "metrics address: connection ended"),
                Err(_) => tracing::debug!("metrics address: a connection outlived its limit"),
            }
            drop(permit);
        });
    }
}

impl Endpoints {
    /// The answer to one request; `HEAD` gets `GET`'s head (hyper leaves the body out).
    pub(super) async fn answer(&self, request: &Request<Incoming>) -> Response<Full<Bytes>> {
        if request.method() != Method::GET && request.method() != Method::HEAD {
            let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "GET or HEAD\n".into());
            response
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            return response;
        }
        let figures = self.board.read();
        let now = Instant::now();
        match request.uri().path() {
            "/livez" => verdict(probe::live(figures.as_deref(), now), "live"),
            "/readyz" => verdict(probe::ready(figures.as_deref(), now), "ready"),
            "/metrics" => {
                let mut response = text(StatusCode::OK, self.metrics_text().await);
                let kind = HeaderValue::from_static(OPENMETRICS);
                response.headers_mut().insert(CONTENT_TYPE, kind);
                response
            }
            _ => text(StatusCode::NOT_FOUND, "/livez, /readyz, /metrics\n".into()),
        }
    }

    /// The metrics as text, rendered for each scrape (a rendering is tens of microseconds;
    /// scrapes are bounded by [`HTTP_CONNECTIONS_MAX`] and one request a connection). The
    /// process's figures and the disk's room are read off the node's thread: `/proc` and
    /// `statvfs` on a hung file system must not stop its event loop.
    async fn metrics_text(&self) -> String {
        let data_dir = self.data_dir.clone();
        let process = tokio::task::spawn_blocking(move || ProcessFigures::read(&data_dir))
            .await
            .unwrap_or_default();
        let figures = self.board.read();
        let ready = probe::ready(figures.as_deref(), Instant::now()).is_ok();
        self.metrics
            .observe_published(figures.as_deref(), ready, &process);
        self.metrics.text()
    }
}

/// 200 with `ok`, or 503 with the reason.
fn verdict(result: Result<(), NotReady>, ok: &str) -> Response<Full<Bytes>> {
    match result {
        Ok(()) => text(StatusCode::OK, format!("{ok}\n")),
        Err(reason) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let kind = HeaderValue::from_static("text/plain; charset=utf-8");
    response.headers_mut().insert(CONTENT_TYPE, kind);
    response
}
