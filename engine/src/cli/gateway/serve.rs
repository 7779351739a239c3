//! Serving the router on the gateway's listener: hyper's HTTP/1.1 and HTTP/2 connections with
//! the gateway's limits on what a caller sends before its body (head bytes, header fields,
//! the time to send them, streams at once) and a drain of open requests at stop. axum's own
//! `serve` leaves hyper's defaults, and without a timer no head is ever timed out.

use super::listener::Limited;
use axum::Router;
use axum::serve::Listener;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::time::Duration;

/// Bytes of a request's head (request line and header fields) at most: hyper's read buffer
/// for HTTP/1.1 and the header list for HTTP/2. Past it the request is refused (431).
pub const GATEWAY_HEADER_BYTES_MAX: usize = 64 << 10;
const _: () = assert!(GATEWAY_HEADER_BYTES_MAX <= u32::MAX as usize);
/// Header fields of an HTTP/1.1 request at most (431 past it).
pub const GATEWAY_HEADERS_MAX: usize = 100;
/// Seconds a caller may take to send an HTTP/1.1 request's head, and any caller its first
/// bytes after it connects (or after its TLS handshake); then the connection closes.
pub const GATEWAY_HEADER_READ_S: u64 = 10;
/// HTTP/2 streams (requests) one connection may have open at once.
pub const GATEWAY_STREAMS_MAX: u32 = 256;
/// Seconds the gateway waits at stop for the requests it took to be answered.
pub const GATEWAY_DRAIN_S: u64 = 10;

/// Serves `router` on `listener` until `stop` completes, then waits at most
/// [`GATEWAY_DRAIN_S`] for open requests to be answered.
pub async fn serve(mut listener: Limited, router: Router, stop: impl Future<Output = ()>) {
    let builder = builder();
    let graceful = GracefulShutdown::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let (io, _) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        let connection = builder
            .serve_connection_with_upgrades(
                TokioIo::new(io),
                TowerToHyperService::new(router.clone()),
            )
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "a caller's connection ended in error");
            }
        });
    }
    drop(listener);
    let drain = Duration::from_secs(GATEWAY_DRAIN_S);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            seconds = GATEWAY_DRAIN_S,
            "requests still open at stop were cut"
        );
    }
}

/// hyper's connection builder with the gateway's limits.
fn builder() -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(GATEWAY_HEADER_READ_S))
        .max_buf_size(GATEWAY_HEADER_BYTES_MAX)
        .max_headers(GATEWAY_HEADERS_MAX);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(GATEWAY_HEADER_BYTES_MAX as u32)
        .max_concurrent_streams(GATEWAY_STREAMS_MAX);
    builder
}
