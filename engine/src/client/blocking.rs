//! A blocking client, for programs that do not use tokio: the async [`super::Client`] driven
//! by a tokio current-thread runtime of its own, one call at a time. Each method waits for
//! the async method of the same name with `block_on`, so requests keep their numbers across
//! retries and are applied exactly once, as with the async client.
//!
//! Do not call it from inside an async runtime (an `async fn`, a tokio task, or a thread
//! within `Runtime::block_on`): tokio panics when a runtime blocks on a thread that is
//! already driving one. An async program uses [`super::Client`] instead.

use super::{ClientConfig, ClientError, SharedAnswer, SharedOptions};
use crate::handler::{Handler, OutcomeOf};
use crate::ids::{ClientId, RequestNumber};
use std::sync::Arc;
use tokio::runtime::Runtime;

/// Why a blocking client did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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

/// Worker threads of a blocking shared client's runtime: they form and send its requests
/// while the callers' threads wait.
pub const SHARED_RUNTIME_THREADS: usize = 1;

/// [`super::SharedClient`] for threads that do not run tokio: `Clone + Send + Sync`, each
/// call blocks its thread until exactly its own outcomes are back, and concurrent calls from
/// any number of threads leave as one request. It carries a runtime of its own (one worker
/// thread) that forms and sends the requests. Not for use inside an async runtime, and its
/// last clone must not be dropped inside one (tokio refuses to drop a runtime there).
pub struct SharedClient<H: Handler> {
    runtime: Arc<Runtime>,
    inner: super::SharedClient<H>,
}

impl<H: Handler> Clone for SharedClient<H> {
    fn clone(&self) -> Self {
        SharedClient {
            runtime: Arc::clone(&self.runtime),
            inner: self.inner.clone(),
        }
    }
}

impl<H: Handler> SharedClient<H> {
    /// Starts the client's runtime and the shared client in it, as
    /// [`super::SharedClient::start`]. Only building the runtime can fail.
    pub fn start(config: ClientConfig, options: SharedOptions) -> Result<Self, StartError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(SHARED_RUNTIME_THREADS)
            .thread_name("shared-client")
            .enable_all()
            .build()
            .map_err(StartError::Runtime)?;
        let inner = {
            let _inside = runtime.enter();
            super::SharedClient::start(config, options)
        };
        let runtime = Arc::new(runtime);
        Ok(SharedClient { runtime, inner })
    }

    /// Submits `commands` with other callers' and blocks until their outcomes are back, as
    /// [`super::SharedClient::submit`]; not for use inside an async runtime.
    pub fn submit(&self, commands: Vec<H::Command>) -> SharedAnswer<H> {
        self.runtime.block_on(self.inner.submit(commands))
    }

    /// Submits one command and blocks until its outcome is back.
    pub fn submit_one(&self, command: H::Command) -> Result<OutcomeOf<H>, super::SharedError> {
        self.runtime.block_on(self.inner.submit_one(command))
    }

    /// Submits commands under a caller's key ([`super::SharedClient::submit_keyed`]) and
    /// blocks until their outcomes are back.
    pub fn submit_keyed(&self, key: ClientId, commands: Vec<H::Command>) -> SharedAnswer<H> {
        self.runtime
            .block_on(self.inner.submit_keyed(key, commands))
    }
}
