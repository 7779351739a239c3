//! A blocking client, for programs that do not use tokio: the async [`super::Client`] driven
//! by a tokio current-thread runtime of its own, one call at a time. Each method waits for
//! the async method of the same name with `block_on`, so requests keep their numbers across
//! retries and are applied exactly once, as with the async client.
//!
//! Do not call it from inside an async runtime (an `async fn`, a tokio task, or a thread
//! within `Runtime::block_on`): tokio panics when a runtime blocks on a thread that is
//! already driving one. An async program uses [`super::Client`] instead.

use super::{ClientConfig, ClientError};
use crate::handler::{Handler, OutcomeOf};
use crate::ids::{ClientId, RequestNumber};
use tokio::runtime::Runtime;

/// Why a blocking client did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The client's own tokio runtime could not be built (no threads, timers or IO driver
    /// from the operating system).
    #[error("no runtime for the blocking client: {0}")]
    Runtime(#[source] std::io::Error),
    /// The cluster did not open or resume the session.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// A client session that blocks the calling thread: the async [`super::Client`] and the
/// runtime that drives it. Not for use inside an async runtime (see the module doc).
pub struct Client {
    runtime: Runtime,
    inner: super::Client,
}

impl Client {
    /// A client with id `id` whose next request is numbered `first_request`, as
    /// [`super::Client::new`]. Only building the runtime can fail.
    pub fn new(
        config: ClientConfig,
        id: ClientId,
        first_request: RequestNumber,
    ) -> Result<Self, StartError> {
        let runtime = runtime()?;
        let inner = super::Client::new(config, id, first_request);
        Ok(Client { runtime, inner })
    }

    /// A new client registered through the log, as [`super::Client::register`]. Blocks until
    /// the cluster commits the registration; not for use inside an async runtime.
    pub fn register(config: ClientConfig) -> Result<Self, StartError> {
        let runtime = runtime()?;
        let inner = runtime.block_on(super::Client::register(config))?;
        Ok(Client { runtime, inner })
    }

    /// The client `id` as the cluster left it, as [`super::Client::resume`]. Blocks until the
    /// leader answers or the configured time passes; not for use inside an async runtime.
    pub fn resume(config: ClientConfig, id: ClientId) -> Result<Self, StartError> {
        let runtime = runtime()?;
        let inner = runtime.block_on(super::Client::resume(config, id))?;
        Ok(Client { runtime, inner })
    }

    /// The client's id.
    pub fn id(&self) -> ClientId {
        self.inner.id()
    }

    /// The number the next request will take.
    pub fn next_request(&self) -> RequestNumber {
        self.inner.next_request()
    }

    /// Sends typed commands as one request and blocks until each command's outcome is back,
    /// as [`super::Client::submit`]; not for use inside an async runtime.
    pub fn submit<H: Handler>(
        &mut self,
        commands: &[H::Command],
    ) -> Result<Vec<OutcomeOf<H>>, ClientError> {
        self.runtime.block_on(self.inner.submit::<H>(commands))
    }

    /// Sends already encoded commands as one request and blocks until the command count and
    /// the encoded outcomes are back, as [`super::Client::submit_encoded`]; not for use
    /// inside an async runtime.
    pub fn submit_encoded(
        &mut self,
        commands: Vec<u8>,
        count: u32,
    ) -> Result<(u32, Vec<u8>), ClientError> {
        self.runtime
            .block_on(self.inner.submit_encoded(commands, count))
    }

    /// Sends already encoded read-only commands as a read, answered off the log, and blocks
    /// until the encoded outcomes are back, as [`super::Client::read_encoded`]; not for use
    /// inside an async runtime.
    pub fn read_encoded(
        &mut self,
        commands: Vec<u8>,
        count: u32,
    ) -> Result<(u32, Vec<u8>), ClientError> {
        self.runtime
            .block_on(self.inner.read_encoded(commands, count))
    }

    /// Sends `requests` pipelined and blocks until every one has ended, as
    /// [`super::Client::submit_pipelined`]: results in the requests' order, one per request.
    /// Not for use inside an async runtime.
    pub fn submit_pipelined<H: Handler>(
        &mut self,
        requests: &[Vec<H::Command>],
    ) -> Vec<Result<Vec<OutcomeOf<H>>, ClientError>> {
        self.runtime
            .block_on(self.inner.submit_pipelined::<H>(requests))
    }
}

/// The client's own runtime: one thread (the caller's), with timers and IO.
fn runtime() -> Result<Runtime, StartError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(StartError::Runtime)
}
