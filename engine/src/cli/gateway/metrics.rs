//! The gateway's Prometheus metrics, served at `GET /metrics`: HTTP requests by endpoint and
//! status, the engine requests it formed (commands each, and how long their first caller
//! waited for the others), callers' latency, and refusals by reason.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::sync::Mutex;
use std::time::Duration;

/// Buckets of the formed batches' sizes: 1, 2, 4, ... 1,024 commands.
const BATCH_BUCKETS: u16 = 11;
/// Buckets of latencies and lingers: 10 us, 20 us, ... about 42 s.
const SECONDS_BUCKETS: u16 = 23;
/// The smallest latency bucket, in seconds.
const SECONDS_BUCKET_MIN: f64 = 1e-5;

/// An HTTP request's labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Served {
    endpoint: &'static str,
    status: u16,
}

/// A refusal's label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

/// The gateway's metrics, one registry.
pub struct GatewayMetrics {
    registry: Mutex<Registry>,
    requests: Family<Served, Counter>,
    refusals: Family<Reason, Counter>,
    batch_commands: Histogram,
    linger_seconds: Histogram,
    latency_seconds: Histogram,
}

impl Default for GatewayMetrics {
    fn default() -> Self {
        let seconds = || {
            Histogram::new(exponential_buckets(
                SECONDS_BUCKET_MIN,
                2.0,
                SECONDS_BUCKETS,
            ))
        };
        let metrics = GatewayMetrics {
            registry: Mutex::new(Registry::with_prefix("gateway")),
            requests: Family::default(),
            refusals: Family::default(),
            batch_commands: Histogram::new(exponential_buckets(1.0, 2.0, BATCH_BUCKETS)),
            linger_seconds: seconds(),
            latency_seconds: seconds(),
        };
        metrics.register();
        metrics
    }
}

impl GatewayMetrics {
    fn register(&self) {
        let mut r = self.registry.lock().expect("not poisoned");
        r.register("requests", "HTTP requests answered", self.requests.clone());
        r.register(
            "refusals",
            "HTTP requests answered without outcomes, by reason",
            self.refusals.clone(),
        );
        r.register(
            "batch_commands",
            "Commands of each engine request the gateway formed",
            self.batch_commands.clone(),
        );
        r.register_with_unit(
            "linger",
            "How long each formed request's first caller waited for it to leave",
            Unit::Seconds,
            self.linger_seconds.clone(),
        );
        r.register_with_unit(
            "latency",
            "HTTP requests' time from their body read to their answer",
            Unit::Seconds,
            self.latency_seconds.clone(),
        );
    }

    /// An engine request formed of `commands` commands, its first caller queued `waited`.
    pub fn formed(&self, commands: usize, waited: Duration) {
        self.batch_commands.observe(commands as f64);
        self.linger_seconds.observe(waited.as_secs_f64());
    }

    /// An HTTP request answered with `status` after `took`.
    pub fn served(&self, endpoint: &'static str, status: u16, took: Duration) {
        self.requests
            .get_or_create(&Served { endpoint, status })
            .inc();
        self.latency_seconds.observe(took.as_secs_f64());
    }

    /// A request answered without outcomes, for `reason`.
    pub fn refused(&self, reason: &'static str) {
        self.refusals.get_or_create(&Reason { reason }).inc();
    }

    /// The metrics in Prometheus' text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        let registry = self.registry.lock().expect("not poisoned");
        prometheus_client::encoding::text::encode(&mut text, &registry)
            .expect("writing to a String cannot fail");
        text
    }
}
