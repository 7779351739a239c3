//! Batching across callers: the commands of concurrent HTTP requests leave as one engine
//! request through the engine's [`SharedClient`], which the gateway shapes (`--batch-max`,
//! `--linger-us`, `--inflight`) and counts (its metrics). Every command is its own
//! transaction in the engine whatever request carries it, so batching changes no outcome: a
//! caller cannot tell. A request with an idempotency key joins them as a keyed run.

use super::answer::Failure;
use super::metrics::GatewayMetrics;
use crate::client::shared::OnFormed;
use crate::client::{ClientConfig, SharedClient, SharedOptions};
use crate::handler::{Handler, OutcomeOf};
use crate::ids::ClientId;
use std::sync::Arc;
use std::time::Duration;

/// Commands queued for an engine request at most, over every caller; past it a caller is
/// answered 503 at once rather than buffered without bound.
pub const GATEWAY_QUEUED_COMMANDS_MAX: usize = 65_536;

/// Seconds a pooled session may stay unused before it is dropped rather than used again (the
/// shared client's rule; see [`crate::client::shared::SHARED_SESSION_IDLE_S`]).
pub const GATEWAY_SESSION_IDLE_S: u64 = crate::client::shared::SHARED_SESSION_IDLE_S;

const _: () = assert!(super::GATEWAY_GIVE_UP_S <= crate::client::shared::SHARED_GIVE_UP_S_MAX);

/// What one caller's commands get: their outcomes, or why there are none.
pub type Answer<H> = Result<Vec<OutcomeOf<H>>, Failure>;

/// How engine requests are formed.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Commands per engine request at most.
    pub batch_max: usize,
    /// How long the first caller of a request waits for others while a session is free.
    pub linger: Duration,
    /// Engine requests in flight at most (each on its own session).
    pub inflight: usize,
}

/// The callers' side: queue commands and await their outcomes.
pub struct Coalescer<H: Handler> {
    shared: SharedClient<H>,
}

impl<H: Handler> Coalescer<H> {
    /// Starts the shared client's tasks on the current runtime.
    pub fn start(config: ClientConfig, shape: Shape, metrics: Arc<GatewayMetrics>) -> Self {
        let on_formed: OnFormed = Arc::new(move |commands: usize, waited: Duration| {
            metrics.formed(commands, waited);
        });
        let options = SharedOptions {
            batch_max: shape.batch_max,
            inflight: shape.inflight,
            linger: shape.linger,
            queued_max: GATEWAY_QUEUED_COMMANDS_MAX,
            on_formed: Some(on_formed),
        };
        Coalescer {
            shared: SharedClient::start(config, options),
        }
    }

    /// Queues `commands` (1 to the engine's request limit) and waits for their outcomes.
    pub async fn submit(&self, commands: Vec<H::Command>) -> Answer<H> {
        let answer = self.shared.submit(commands).await;
        answer.map_err(|error| Failure::shared(&error))
    }

    /// Queues `commands` under the idempotency key whose session is `id`: they join the
    /// next engine request as a keyed run, which the cluster applies once for the key (from
    /// any gateway) and answers again with the outcomes it had.
    pub async fn submit_keyed(&self, id: ClientId, commands: Vec<H::Command>) -> Answer<H> {
        let answer = self.shared.submit_keyed(id, commands).await;
        answer.map_err(|error| Failure::keyed(&error))
    }
}
