//! Batching across callers: the commands of concurrent HTTP requests leave as one engine
//! request through the engine's [`SharedClient`], which the gateway shapes (`--batch-max`,
//! `--linger-us`, `--inflight`) and counts (its metrics). Every command is its own
//! transaction in the engine whatever request carries it, so batching changes no outcome: a
//! caller cannot tell. Requests with an idempotency key go alone, each on its own session.

use super::answer::Failure;
use super::metrics::GatewayMetrics;
use crate::client::shared::OnFormed;
use crate::client::{ClientConfig, SharedClient, SharedOptions};
use crate::handler::{Handler, OutcomeOf};
use crate::ids::ClientId;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, oneshot};

/// Commands queued for an engine request at most, over every caller; past it a caller is
/// answered 503 at once rather than buffered without bound.
pub const GATEWAY_QUEUED_COMMANDS_MAX: usize = 65_536;

/// Keyed requests (each its own session, never coalesced) in flight at once at most: each
/// holds a connection to the leader, which counts its clients' connections.
pub const GATEWAY_KEYED_INFLIGHT_MAX: usize = 256;

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
    /// Keyed requests in flight.
    keyed: Arc<Semaphore>,
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
            keyed: Arc::new(Semaphore::new(GATEWAY_KEYED_INFLIGHT_MAX)),
        }
    }

    /// Queues `commands` (1 to the engine's request limit) and waits for their outcomes.
    pub async fn submit(&self, commands: Vec<H::Command>) -> Answer<H> {
        let answer = self.shared.submit(commands).await;
        answer.map_err(|error| Failure::shared(&error))
    }

    /// Sends `commands` as request 1 of session `id` (an idempotency key's), on a pooled
    /// session's connection, counted in the queue's bound. The session's own answers
    /// (expired, reused) are the caller's, not the pool's. The request runs in a task of its
    /// own: a caller that goes away (its connection closed) leaves it to finish rather than
    /// cut it off mid-exchange.
    pub async fn submit_keyed(&self, id: ClientId, commands: Vec<H::Command>) -> Answer<H> {
        let permit = self.keyed.clone().acquire_owned().await;
        let permit = permit.expect("the semaphore is never closed");
        let shared = self.shared.clone();
        let (reply, answer) = oneshot::channel();
        tokio::spawn(async move {
            let answered = shared.submit_as(id, &commands).await;
            drop(permit);
            // A caller that went away needs no answer.
            let _ = reply.send(answered.map_err(|error| Failure::keyed(&error)));
        });
        answer.await.unwrap_or(Err(Failure::Stopped))
    }
}
