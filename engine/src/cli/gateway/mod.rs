//! `gateway`: the engine over HTTP, for callers in any language. A stateless process beside
//! the cluster (one per application host, or several behind a load balancer) that takes JSON
//! commands, batches the commands of concurrent callers into engine requests, and answers
//! each caller with its own outcomes once they are committed.
//!
//! - `POST /v1/commands`: a JSON array of 1 to 1,024 of the handler's commands (serde's
//!   mapping of its command type, read strictly: a field the type does not have refuses the
//!   whole body: `json.rs`); the answer is the array of their outcomes, in order (a 128-bit
//!   integer in one is a string of its digits).
//! - `POST /v1/reads`: read-only commands, answered off the log (linearizable).
//! - `Idempotency-Key: KEY` on a POST: the cluster keeps the key with its outcomes, so a
//!   retry through any gateway gets the first answer and never runs twice
//!   (`notes/decisions/gateway.md`).
//! - `GET /livez`, `GET /readyz` (a leader answers), `GET /metrics` (Prometheus).
//!
//! Errors are HTTP statuses with a JSON body (see [`Failure`]); every limit is a constant
//! below or beside it ([`GATEWAY_QUEUED_COMMANDS_MAX`]).

mod answer;
mod changes;
mod coalesce;
pub(crate) mod json;
mod listener;
mod metrics;
mod openapi;
mod serve;
#[cfg(test)]
pub(crate) mod tests;
mod tls;

pub use answer::{Failure, RETRY_AFTER_S, write_outcome};
pub use coalesce::{GATEWAY_QUEUED_COMMANDS_MAX, GATEWAY_SESSION_IDLE_S};
pub use openapi::{
    SchemaMismatch, json_schema, openapi_document, openapi_json, reachable_schemas, validate,
};
pub use serve::{
    GATEWAY_DRAIN_S, GATEWAY_HEADER_BYTES_MAX, GATEWAY_HEADER_READ_S, GATEWAY_HEADERS_MAX,
    GATEWAY_STREAMS_MAX,
};
pub use tls::{GATEWAY_TLS_HANDSHAKE_S, GatewayTlsError};

use super::CliHandler;
use crate::client::{ClientConfig, node_status};
use crate::entry::REQUEST_COMMANDS_MAX;
use crate::handler::Handler;
use crate::ids::ClientId;
use anyhow::Context;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use coalesce::{Coalescer, Shape};
use metrics::GatewayMetrics;
use net::message::Role;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes of a request body at most.
pub const GATEWAY_BODY_BYTES_MAX: usize = 4 << 20;
/// Seconds a caller may take to send its body.
pub const GATEWAY_BODY_READ_S: u64 = 10;
/// Connections open at once at most; more wait in the listen backlog.
pub const GATEWAY_CONNECTIONS_MAX: usize = 4096;
/// Characters of an `Idempotency-Key` at most.
pub const IDEMPOTENCY_KEY_CHARS_MAX: usize = 255;
/// Seconds an engine request may go unanswered before the caller is told the outcome is
/// unknown (503): a leader's failover takes a fraction of it.
pub const GATEWAY_GIVE_UP_S: u64 = 10;
/// Milliseconds between two probes of the nodes for `/readyz`.
const READY_PROBE_MS: u64 = 1000;

/// Options of `gateway`.
#[derive(clap::Args, Debug, Clone)]
pub struct GatewayArgs {
    /// The client file (or the cluster file) of the cluster to serve.
    #[arg(long, env = crate::cli::CLUSTER_FILE_ENV, visible_alias = "client-file")]
    pub cluster: PathBuf,
    /// Where to listen for HTTP (HTTP/1.1 and HTTP/2; in TLS only, with `--tls-cert-file`).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Commands per engine request at most, over every caller it carries.
    #[arg(long, default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(REQUEST_COMMANDS_MAX)))]
    pub batch_max: u32,
    /// Microseconds a caller waits at most for others to share its engine request.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pub linger_us: u64,
    /// Engine requests in flight at most (each on its own client session).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub inflight: u32,
    /// A file holding the callers' token (one line, owner-only): callers then send
    /// `Authorization: Bearer <token>`. Without it any caller that reaches the port is served.
    #[arg(long, env = crate::cli::GATEWAY_TOKEN_FILE_ENV)]
    pub token_file: Option<PathBuf>,
    /// The gateway's certificate chain (PEM, leaf first): the listener then speaks TLS only
    /// (TLS 1.3; HTTP/2 or HTTP/1.1 by ALPN). Needs `--tls-key-file`.
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// The private key of `--tls-cert-file` (PEM, owner-only).
    #[arg(long)]
    pub tls_key_file: Option<PathBuf>,
    /// A CA's certificates (PEM): every caller must present a certificate it signed, or its
    /// TLS handshake fails (mutual TLS). With a `--token-file` callers need both.
    #[arg(long)]
    pub tls_client_ca_file: Option<PathBuf>,
}

/// What every HTTP request of a gateway shares.
struct Gateway<H: Handler> {
    config: ClientConfig,
    commands: Coalescer<H>,
    reads: Coalescer<H>,
    /// The token's hash (compared in constant time), when callers need one.
    token: Option<blake3::Hash>,
    /// Sessions of keyed requests in flight through this gateway.
    keys_in_flight: Mutex<HashSet<ClientId>>,
    ready: AtomicBool,
    metrics: Arc<GatewayMetrics>,
    /// What the change stream publishes of each command, when this binary serves one.
    publish: Option<crate::cli::Publish<H>>,
    /// Every node, by id, where the change stream is read from.
    nodes: Vec<(crate::ids::NodeId, crate::address::Address)>,
}

/// Which endpoint a POST came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Endpoint {
    Commands,
    Reads,
}

/// Serves `args.listen` until SIGINT or SIGTERM, with no change stream (`/v1/changes`
/// answers 404; [`gateway_publishing`] serves one).
pub fn gateway<H: CliHandler>(args: GatewayArgs) -> anyhow::Result<()> {
    serve_until_stopped::<H>(args, None)
}

/// [`gateway`], and `GET /v1/changes`: the change stream, each command published as
/// `publish` says ([`crate::cli::publish_all`]: the command and its outcome).
pub fn gateway_publishing<H: CliHandler>(
    args: GatewayArgs,
    publish: crate::cli::Publish<H>,
) -> anyhow::Result<()> {
    serve_until_stopped::<H>(args, Some(publish))
}

fn serve_until_stopped<H: CliHandler>(
    args: GatewayArgs,
    publish: Option<crate::cli::Publish<H>>,
) -> anyhow::Result<()> {
    // The listener's own options first: a mistake there is the operator's, whatever the
    // cluster.
    let tls = tls::from_options(&args, std::time::SystemTime::now())?;
    let file = crate::cli::read_client_file(&args.cluster)?;
    let nodes = (file.nodes.iter())
        .map(|n| (crate::ids::NodeId(n.id), n.client_address.clone()))
        .collect();
    let mut config = file.client_config()?;
    config.give_up_after = Some(Duration::from_secs(GATEWAY_GIVE_UP_S));
    let token = match &args.token_file {
        Some(path) => Some(read_token(path)?),
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let serving = Serving {
        config,
        token,
        publish,
        nodes,
    };
    runtime.block_on(serve::<H>(args, serving, tls))
}

/// What a gateway serves with beside its options.
struct Serving<H: Handler> {
    config: ClientConfig,
    token: Option<blake3::Hash>,
    publish: Option<crate::cli::Publish<H>>,
    nodes: Vec<(crate::ids::NodeId, crate::address::Address)>,
}

/// The token of `--token-file`, as its hash.
fn read_token(path: &std::path::Path) -> anyhow::Result<blake3::Hash> {
    let source = crate::operator::secrets::SecretSource {
        field: "token",
        inline: None,
        file: Some(path),
    };
    let token = source.read()?.context("the token file is empty")?;
    anyhow::ensure!(
        !token.is_empty(),
        "the token file {} is empty",
        path.display()
    );
    Ok(blake3::hash(&token))
}

async fn serve<H: CliHandler>(
    args: GatewayArgs,
    serving: Serving<H>,
    tls: Option<net::tls::HttpAcceptor>,
) -> anyhow::Result<()> {
    let Serving {
        config,
        token,
        publish,
        nodes,
    } = serving;
    let metrics = Arc::new(GatewayMetrics::default());
    let shape = Shape {
        batch_max: args.batch_max as usize,
        linger: Duration::from_micros(args.linger_us),
        inflight: args.inflight as usize,
    };
    let gateway = Arc::new(Gateway::<H> {
        commands: Coalescer::start(config.clone(), shape, metrics.clone()),
        reads: Coalescer::start(config.clone(), shape, metrics.clone()),
        config,
        token,
        keys_in_flight: Mutex::new(HashSet::new()),
        ready: AtomicBool::new(false),
        metrics,
        publish,
        nodes,
    });
    tokio::spawn(probe_readiness(gateway.clone()));
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mutual = args.tls_client_ca_file.is_some();
    let listener = listener::Limited::bind(args.listen, GATEWAY_CONNECTIONS_MAX, tls)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    tracing::info!(listen = %listener.address(), scheme, mutual, "gateway serving");
    serve::serve(listener, router(gateway), stop_signal()).await;
    Ok(())
}

fn router<H: CliHandler>(gateway: Arc<Gateway<H>>) -> Router {
    Router::new()
        .route("/v1/commands", post(post_commands::<H>))
        .route("/v1/reads", post(post_reads::<H>))
        .route("/v1/changes", get(changes::get_changes::<H>))
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz::<H>))
        .route("/metrics", get(metrics_text::<H>))
        .route("/v1/openapi.json", get(openapi_json::<H>))
        .with_state(gateway)
}

/// SIGINT or SIGTERM.
pub(crate) async fn stop_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
    tracing::info!("gateway stopping");
}

async fn post_commands<H: CliHandler>(
    State(gateway): State<Arc<Gateway<H>>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    gateway.answer(Endpoint::Commands, &headers, body).await
}

async fn post_reads<H: CliHandler>(
    State(gateway): State<Arc<Gateway<H>>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    gateway.answer(Endpoint::Reads, &headers, body).await
}

async fn readyz<H: CliHandler>(State(gateway): State<Arc<Gateway<H>>>) -> Response {
    if gateway.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "no leader answers\n").into_response()
    }
}

async fn metrics_text<H: CliHandler>(State(gateway): State<Arc<Gateway<H>>>) -> Response {
    let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    (
        [(header::CONTENT_TYPE, content_type)],
        gateway.metrics.encode(),
    )
        .into_response()
}

/// Keeps `ready` true while some node says it leads.
async fn probe_readiness<H: Handler>(gateway: Arc<Gateway<H>>) {
    let timeout = Duration::from_millis(READY_PROBE_MS);
    loop {
        let mut leads = false;
        for address in &gateway.config.nodes {
            let status = node_status(&gateway.config, address, timeout).await;
            leads |= status.is_ok_and(|s| s.role == Role::Leader);
            if leads {
                break;
            }
        }
        gateway.ready.store(leads, Ordering::Relaxed);
        tokio::time::sleep(timeout).await;
    }
}

impl<H: CliHandler> Gateway<H> {
    /// A POST's answer: the outcomes, or the failure; counted in the metrics.
    async fn answer(&self, endpoint: Endpoint, headers: &HeaderMap, body: Body) -> Response {
        let started = Instant::now();
        let response = match self.outcomes(endpoint, headers, body).await {
            Ok(response) => response,
            Err(failure) => {
                self.metrics.refused(failure.code());
                failure.into_response()
            }
        };
        let name = match endpoint {
            Endpoint::Commands => "commands",
            Endpoint::Reads => "reads",
        };
        self.metrics
            .served(name, response.status().as_u16(), started.elapsed());
        response
    }

    async fn outcomes(
        &self,
        endpoint: Endpoint,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<Response, Failure> {
        self.authorize(headers)?;
        let key = idempotency_key(headers)?;
        let commands = parse_commands::<H>(&read_body(headers, body).await?)?;
        if endpoint == Endpoint::Reads {
            if let Some(index) = commands.iter().position(|c| !H::read_only(c)) {
                return Err(Failure::NotReadOnly { index });
            }
            let outcomes = self.reads.submit(commands).await?;
            return Ok(answer::outcomes_json::<H>(&outcomes));
        }
        let outcomes = match key {
            Some(key) => self.submit_keyed(&key, commands).await?,
            None => self.commands.submit(commands).await?,
        };
        Ok(answer::outcomes_json::<H>(&outcomes))
    }

    /// Checks the caller's token, when the gateway has one.
    fn authorize(&self, headers: &HeaderMap) -> Result<(), Failure> {
        let Some(token) = self.token else {
            return Ok(());
        };
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.as_bytes().strip_prefix(b"Bearer "))
            .ok_or(Failure::Unauthorized)?;
        // blake3::Hash compares in constant time.
        if blake3::hash(given) == token {
            Ok(())
        } else {
            Err(Failure::Unauthorized)
        }
    }

    /// Sends a keyed request on the key's own session, as request 1 (over a pooled session's
    /// connection): the cluster's session of that id answers a retry (from any gateway) with
    /// the first attempt's outcomes.
    async fn submit_keyed(
        &self,
        key: &str,
        commands: Vec<H::Command>,
    ) -> Result<Vec<crate::handler::OutcomeOf<H>>, Failure> {
        let id = key_session(key);
        if !self.keys_in_flight.lock().expect("not poisoned").insert(id) {
            return Err(Failure::KeyInFlight);
        }
        let _done = KeyInFlight { gateway: self, id };
        self.commands.submit_keyed(id, commands).await
    }
}

/// Takes a key's session off the in-flight set when its request is answered (or its caller
/// went away).
struct KeyInFlight<'a, H: Handler> {
    gateway: &'a Gateway<H>,
    id: ClientId,
}

impl<H: Handler> Drop for KeyInFlight<'_, H> {
    fn drop(&mut self) {
        let mut keys = self.gateway.keys_in_flight.lock().expect("not poisoned");
        keys.remove(&self.id);
    }
}

pub use crate::client::key_session;

/// The `Idempotency-Key` header, if any: 1 to [`IDEMPOTENCY_KEY_CHARS_MAX`] visible ASCII
/// characters.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, Failure> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let bad = Failure::BadKey {
        max: IDEMPOTENCY_KEY_CHARS_MAX,
    };
    let bytes = value.as_bytes();
    if !is_key(bytes) {
        return Err(bad);
    }
    Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
}

/// True for a caller's key as the gateway and `client --key` take it: 1 to
/// [`IDEMPOTENCY_KEY_CHARS_MAX`] visible ASCII characters, so that a key one of them takes
/// the other takes too.
pub fn is_key(bytes: &[u8]) -> bool {
    (1..=IDEMPOTENCY_KEY_CHARS_MAX).contains(&bytes.len()) && bytes.iter().all(u8::is_ascii_graphic)
}

/// The whole body, within [`GATEWAY_BODY_BYTES_MAX`] and [`GATEWAY_BODY_READ_S`]; one
/// announced over the limit is refused before it is read.
async fn read_body(headers: &HeaderMap, body: Body) -> Result<Bytes, Failure> {
    let too_large = Failure::TooLarge {
        max: GATEWAY_BODY_BYTES_MAX,
    };
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    if announced.is_some_and(|bytes| bytes > GATEWAY_BODY_BYTES_MAX as u64) {
        return Err(too_large);
    }
    let read = axum::body::to_bytes(body, GATEWAY_BODY_BYTES_MAX);
    match tokio::time::timeout(Duration::from_secs(GATEWAY_BODY_READ_S), read).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(_)) => Err(too_large),
        Err(_) => Err(Failure::SlowBody {
            seconds: GATEWAY_BODY_READ_S,
        }),
    }
}

/// The body as 1 to [`REQUEST_COMMANDS_MAX`] of the handler's commands, read strictly
/// ([`json::read`]): a body that is not one is described with the parser's message and the
/// path to the first wrong field; a field a command's type does not have refuses the whole
/// body, before anything is submitted.
fn parse_commands<H: CliHandler>(body: &[u8]) -> Result<Vec<H::Command>, Failure> {
    let commands = json::read::<Vec<H::Command>>(body).map_err(|bad| Failure::BadBody {
        message: bad.message,
        path: bad.path,
    })?;
    let max = REQUEST_COMMANDS_MAX as usize;
    if commands.is_empty() || commands.len() > max {
        return Err(Failure::CommandCount {
            count: commands.len(),
            max,
        });
    }
    Ok(commands)
}
