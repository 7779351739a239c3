//! `publish`: the change stream to a RabbitMQ exchange (AMQP 0.9.1), as TigerBeetle's change
//! data capture does. It reads the stream from a follower, publishes one message per entry or
//! per command (each persistent, its `message_id` its position) with publisher confirms, and
//! keeps the position after the last confirmed message durably (`progress.rs`): a restarted
//! publisher goes on where the broker confirmed, so every committed command reaches the
//! broker at least once and in commit order; one published twice has the same position.
//! A broker that goes away is reconnected to, a node that stops is replaced by another; a
//! position no node keeps any more stops it with an error naming the oldest one served.

mod broker;
mod progress;

pub use broker::{Broker, BrokerError, Message};
pub use progress::{Kept, Lag, Progress, ProgressError};

use super::changes::{CHANGES_FOLLOW_WAIT_MS, CHANGES_RETRY_MS, CHANGES_STATUS_TIMEOUT_S};
use super::changes::{Lines, Place, Publish, exit_of, parse_position};
use super::{CliHandler, Exit, coded, runtime};
use crate::client::{ChangeStream, ChangesError, ClientConfig};
use crate::ids::{EntryIndex, NodeId};
use net::message::{ChangeBatch, ChangePosition};
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Milliseconds between two tries to reach the broker.
pub const PUBLISH_RECONNECT_MS: u64 = 1_000;
/// Bytes of JSON a message is given room for per byte of encoded changes.
const JSON_BYTES_PER_CHANGE_BYTE: usize = 4;
/// The routing key of every message by default.
pub const PUBLISH_ROUTING_KEY_DEFAULT: &str = "changes";

/// How many commands a message holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Per {
    /// One message per log entry: `{"index", "version", "changes": [lines]}`.
    Entry,
    /// One message per command: the line `changes --json` prints.
    Command,
}

/// Options of `publish`.
#[derive(clap::Args, Debug)]
pub struct PublishArgs {
    /// The cluster file, or a client file (`client-file` writes one).
    #[arg(long, env = crate::cli::CLUSTER_FILE_ENV, visible_alias = "client-file")]
    pub cluster: PathBuf,
    /// The broker: amqp://USER:PASSWORD@HOST:PORT/VHOST (the vhost `/` is `%2f`).
    #[arg(
        long,
        value_name = "URL",
        env = "ENGINE_AMQP_URL",
        hide_env_values = true
    )]
    pub amqp: String,
    /// The exchange to publish to (declared durable, of kind topic, when missing).
    #[arg(long, value_name = "NAME")]
    pub exchange: String,
    /// One message per log entry or per command.
    #[arg(long, value_enum, default_value_t = Per::Entry)]
    pub per: Per,
    /// The routing key of every message.
    #[arg(long, value_name = "KEY", default_value = PUBLISH_ROUTING_KEY_DEFAULT)]
    pub routing_key: String,
    /// Where the position after the last confirmed message is kept, durably (default:
    /// `publish-EXCHANGE.position` in the working directory). A restart goes on from it.
    #[arg(long, value_name = "FILE")]
    pub progress: Option<PathBuf>,
    /// Where to start when the progress file does not exist yet: ENTRY or ENTRY.POSITION.
    #[arg(long, value_name = "POSITION", value_parser = parse_position, default_value = "1")]
    pub from: ChangePosition,
    /// Serve the publisher's metrics at `GET /metrics` on this address (the confirmed entry,
    /// the lag in entries and seconds).
    #[arg(long, value_name = "ADDRESS")]
    pub metrics: Option<std::net::SocketAddr>,
}

/// Publishes the change stream to `args.exchange`, each command as `publish` says, until
/// SIGINT or SIGTERM, or until the stream cannot go on.
pub fn publish<H: CliHandler>(args: PublishArgs, publish: Publish<H>) -> anyhow::Result<()> {
    let path = (args.progress.clone())
        .unwrap_or_else(|| PathBuf::from(format!("publish-{}.position", args.exchange)));
    let progress = Progress::new(path, &args.exchange);
    let start = progress.read().map_err(|e| coded(Exit::Usage, e))?;
    let file = super::read_client_file(&args.cluster)?;
    let nodes = (file.nodes.iter())
        .map(|n| (NodeId(n.id), n.client_address.clone()))
        .collect();
    let start = start.unwrap_or(Kept {
        next: args.from,
        version: None,
    });
    let stream = ChangeStream::new(file.client_config()?, nodes, start.next);
    let metrics = Arc::new(PublisherMetrics::default());
    let mut lines = Lines::<H>::new(publish);
    lines.resume_version(start.version);
    let publisher = Publisher {
        confirmed: start,
        stream,
        lines,
        progress,
        lag: Lag::default(),
        metrics: Arc::clone(&metrics),
        per: args.per,
    };
    runtime()?.block_on(async move {
        if let Some(address) = args.metrics {
            tokio::spawn(serve_metrics(address, metrics));
        }
        tokio::select! {
            result = publisher.run(&args) => result,
            () = stop_signal() => Ok(()),
        }
    })
}

/// A publisher: the stream it reads, what it publishes of each command, where it stands.
struct Publisher<H: CliHandler> {
    stream: ChangeStream<ClientConfig>,
    /// The position after the last message the broker confirmed and the handler version
    /// before it (kept in `progress`).
    confirmed: Kept,
    lines: Lines<H>,
    progress: Progress,
    lag: Lag,
    metrics: Arc<PublisherMetrics>,
    per: Per,
}

impl<H: CliHandler> Publisher<H> {
    /// Publishes until the stream cannot go on; a lost broker is connected to again, and
    /// publishing goes on from the last confirmed position.
    async fn run(mut self, args: &PublishArgs) -> anyhow::Result<()> {
        let timeout = Duration::from_secs_f64(CHANGES_STATUS_TIMEOUT_S);
        self.stream.prefer_followers(timeout).await;
        tracing::info!(
            exchange = args.exchange,
            from = %position(self.confirmed.next),
            progress = %self.progress.path().display(),
            "publishing the change stream"
        );
        loop {
            let connected = Broker::connect(&args.amqp, &args.exchange, &args.routing_key).await;
            let broker = match connected {
                Ok(broker) => broker,
                Err(error) => {
                    tracing::warn!(%error, "cannot reach the broker; trying again");
                    tokio::time::sleep(Duration::from_millis(PUBLISH_RECONNECT_MS)).await;
                    continue;
                }
            };
            match self.publish_batches(&broker).await {
                Ok(never) => match never {},
                Err(Stop::Broker(error)) => {
                    let from = position(self.confirmed.next);
                    tracing::warn!(%error, from, "the broker failed; publishing again from the last confirmed position");
                    self.metrics.reconnects.inc();
                    self.stream.seek(self.confirmed.next);
                    self.lines.resume_version(self.confirmed.version);
                }
                Err(Stop::Fatal(error)) => return Err(error),
            }
        }
    }

    /// Reads batches and publishes them, each confirmed before its position is kept.
    async fn publish_batches(&mut self, broker: &Broker) -> Result<Infallible, Stop> {
        let wait = Duration::from_millis(CHANGES_FOLLOW_WAIT_MS);
        loop {
            let batch = match self.stream.next_batch(wait).await {
                Ok(batch) => batch,
                Err(ChangesError::Unreachable(errors)) => {
                    tracing::warn!(?errors, "no node answered; asking again");
                    tokio::time::sleep(Duration::from_millis(CHANGES_RETRY_MS)).await;
                    continue;
                }
                Err(error) => return Err(Stop::Fatal(exit_of(error))),
            };
            self.lag.applied(batch.applied, Instant::now());
            let messages = self.messages(&batch).map_err(Stop::Fatal)?;
            broker.publish(&messages).await.map_err(Stop::Broker)?;
            self.metrics.messages.inc_by(messages.len() as u64);
            self.confirm(&batch).await.map_err(Stop::Fatal)?;
        }
    }

    /// The messages of `batch`, in order.
    fn messages(&mut self, batch: &ChangeBatch) -> anyhow::Result<Vec<Message>> {
        let mut messages = Vec::new();
        for entry in &batch.entries {
            let index = entry.index.0;
            match self.per {
                Per::Entry => {
                    // `{"index":I,"version":V,"changes":[lines]}`, written as it goes.
                    let head = format!(
                        r#"{{"index":{index},"version":{},"changes":["#,
                        entry.version
                    );
                    let mut body = head.into_bytes();
                    // The JSON of a change is a few times its encoded bytes: one allocation.
                    body.reserve(JSON_BYTES_PER_CHANGE_BYTE * entry.changes.len());
                    let empty = body.len();
                    self.lines.write(entry, |_, line| {
                        if body.len() > empty {
                            body.push(b',');
                        }
                        body.extend_from_slice(line);
                    })?;
                    if body.len() > empty {
                        body.extend_from_slice(b"]}");
                        let message_id = index.to_string();
                        messages.push(Message { message_id, body });
                    }
                }
                Per::Command => self.lines.write(entry, |place, line| {
                    let message_id = message_id(index, place);
                    messages.push(Message {
                        message_id,
                        body: line.to_vec(),
                    });
                })?,
            }
        }
        Ok(messages)
    }

    /// Keeps the position after `batch`, whose messages the broker confirmed, durably.
    async fn confirm(&mut self, batch: &ChangeBatch) -> anyhow::Result<()> {
        let now = Instant::now();
        // The lines are written through the batch's end: their version is the confirmed one.
        let kept = Kept {
            next: batch.next,
            version: self.lines.version(),
        };
        if kept != self.confirmed {
            let progress = self.progress.clone();
            tokio::task::spawn_blocking(move || progress.write(kept)).await??;
            self.confirmed = kept;
        }
        let confirmed = self.confirmed.next.index.prev();
        self.lag.confirmed(confirmed);
        self.metrics
            .set(confirmed, batch.applied, self.lag.seconds(now));
        Ok(())
    }
}

/// The `message_id` of a message per command: `ENTRY.POSITION`, and `ENTRY.upgrade` for the
/// upgrade line before an entry's commands, so that no two messages share an id (consumers
/// deduplicate by it).
fn message_id(index: u64, place: Place) -> String {
    match place {
        Place::Command(position) => format!("{index}.{position}"),
        Place::Upgrade => format!("{index}.upgrade"),
    }
}

/// Why publishing stopped: the broker (connect again) or the stream (give up).
enum Stop {
    Broker(BrokerError),
    Fatal(anyhow::Error),
}

/// A position as the progress file and the logs write it.
fn position(at: ChangePosition) -> String {
    format!("{}.{}", at.index.0, at.position)
}

/// Ends at SIGINT or SIGTERM.
async fn stop_signal() {
    super::gateway::stop_signal().await;
}

/// The publisher's metrics (`publisher_` on `GET /metrics`).
#[derive(Default)]
struct PublisherMetrics {
    confirmed_index: prometheus_client::metrics::gauge::Gauge,
    applied_index: prometheus_client::metrics::gauge::Gauge,
    lag_entries: prometheus_client::metrics::gauge::Gauge,
    lag_seconds: prometheus_client::metrics::gauge::Gauge<f64, std::sync::atomic::AtomicU64>,
    messages: prometheus_client::metrics::counter::Counter,
    reconnects: prometheus_client::metrics::counter::Counter,
}

impl PublisherMetrics {
    /// Where the publisher stands: the last entry confirmed, the node's last applied, and
    /// the age of the oldest change not confirmed yet.
    fn set(&self, confirmed: EntryIndex, applied: EntryIndex, lag_seconds: f64) {
        let gauge = |index: EntryIndex| i64::try_from(index.0).unwrap_or(i64::MAX);
        self.confirmed_index.set(gauge(confirmed));
        self.applied_index.set(gauge(applied));
        self.lag_entries
            .set(gauge(applied).saturating_sub(gauge(confirmed)).max(0));
        self.lag_seconds.set(lag_seconds);
    }

    /// The metrics in the OpenMetrics text format.
    fn encode(&self) -> String {
        let mut registry = prometheus_client::registry::Registry::with_prefix("publisher");
        let gauges = [
            (
                "confirmed_index",
                "The last entry whose changes the broker confirmed",
                &self.confirmed_index,
            ),
            (
                "applied_index",
                "The last entry the node read from had applied",
                &self.applied_index,
            ),
            (
                "lag_entries",
                "Entries applied and not confirmed by the broker yet",
                &self.lag_entries,
            ),
        ];
        for (name, help, gauge) in gauges {
            registry.register(name, help, gauge.clone());
        }
        registry.register_with_unit(
            "lag",
            "Age of the oldest change not confirmed by the broker yet (0: none)",
            prometheus_client::registry::Unit::Seconds,
            self.lag_seconds.clone(),
        );
        registry.register(
            "messages",
            "Messages the broker confirmed",
            self.messages.clone(),
        );
        registry.register(
            "reconnects",
            "Times the broker connection was made again",
            self.reconnects.clone(),
        );
        let mut text = String::new();
        match prometheus_client::encoding::text::encode(&mut text, &registry) {
            Ok(()) => text,
            Err(error) => format!("# the metrics do not encode: {error}\n"),
        }
    }
}

/// Serves `GET /metrics` on `address` until the process ends.
async fn serve_metrics(address: std::net::SocketAddr, metrics: Arc<PublisherMetrics>) {
    let listener = match tokio::net::TcpListener::bind(address).await {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(%address, %error, "cannot serve the metrics");
            return;
        }
    };
    let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    let router = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || async move {
            (
                [(axum::http::header::CONTENT_TYPE, content_type)],
                metrics.encode(),
            )
        }),
    );
    if let Err(error) = axum::serve(listener, router).await {
        tracing::error!(%error, "the metrics endpoint stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves a message per command is named by its place, and an upgrade line by a name no
    /// command's message has.
    #[test]
    fn every_message_per_command_has_an_id_of_its_own() {
        assert_eq!(message_id(1200, Place::Command(0)), "1200.0");
        assert_eq!(message_id(1200, Place::Command(7)), "1200.7");
        assert_eq!(message_id(1200, Place::Upgrade), "1200.upgrade");
    }
}
