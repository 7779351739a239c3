//! Where the client and the three nodes run: all on one current-thread runtime (`ct`), on one
//! runtime with two worker threads (`mt2`), or each on a thread of its own with its own
//! current-thread runtime (`pernode`: what separate processes look like to the scheduler).

use crate::ledger::Ledger;
use crate::path::{self, Measured, Plan};
use crate::wal::Wal;
use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::thread::JoinHandle;
use tokio::runtime::{Builder, Runtime};

/// Worker threads of the `mt2` layout's runtime: one per core of the two-core machine.
const MT_WORKER_THREADS: usize = 2;

/// One of the three layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Every party a task of one current-thread runtime.
    Ct,
    /// Every party a task of one multi-thread runtime of [`MT_WORKER_THREADS`] workers.
    Mt2,
    /// Every party on its own thread.
    PerNode,
}

impl Layout {
    /// Every layout, in the order the probe runs them by default.
    pub const ALL: [Layout; 3] = [Layout::Ct, Layout::Mt2, Layout::PerNode];

    /// The layout's name on the command line and in the output.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Ct => "ct",
            Layout::Mt2 => "mt2",
            Layout::PerNode => "pernode",
        }
    }

    /// The layout called `name`.
    pub fn from_name(name: &str) -> Option<Layout> {
        Layout::ALL.into_iter().find(|layout| layout.name() == name)
    }
}

/// One node's parts, made before anything runs.
struct Node {
    listener: TcpListener,
    wal: Wal,
    ledger: Ledger,
}

impl Node {
    /// A listener on a free loopback port, a WAL file in `dir`, a ledger.
    fn make(dir: &Path, layout: Layout, role: &str) -> std::io::Result<Node> {
        let name = format!("floor-{}-{}-{role}.wal", std::process::id(), layout.name());
        Ok(Node {
            listener: TcpListener::bind("127.0.0.1:0")?,
            wal: Wal::create(dir.join(name))?,
            ledger: Ledger::open(),
        })
    }
}

/// The three nodes, their listeners bound so that every address is known before any starts.
struct Cluster {
    leader: Node,
    followers: [Node; 2],
}

impl Cluster {
    fn make(dir: &Path, layout: Layout) -> std::io::Result<Cluster> {
        Ok(Cluster {
            leader: Node::make(dir, layout, "leader")?,
            followers: [
                Node::make(dir, layout, "f1")?,
                Node::make(dir, layout, "f2")?,
            ],
        })
    }
}

/// Runs the client's plan against a fresh cluster in `layout`, WALs in `dir`.
pub fn run(layout: Layout, dir: &Path, plan: Plan) -> std::io::Result<Measured> {
    let cluster = Cluster::make(dir, layout)?;
    match layout {
        Layout::Ct => on_one_runtime(
            Builder::new_current_thread().enable_all().build()?,
            cluster,
            plan,
        ),
        Layout::Mt2 => {
            let mut builder = Builder::new_multi_thread();
            let runtime = builder
                .worker_threads(MT_WORKER_THREADS)
                .enable_all()
                .build()?;
            on_one_runtime(runtime, cluster, plan)
        }
        Layout::PerNode => thread_per_node(cluster, plan),
    }
}

/// Every party as a task of `runtime`; waits for all of them to end.
fn on_one_runtime(runtime: Runtime, cluster: Cluster, plan: Plan) -> std::io::Result<Measured> {
    let leader_address = cluster.leader.listener.local_addr()?;
    let follower_addresses = follower_addresses(&cluster)?;
    runtime.block_on(async move {
        let Cluster { leader, followers } = cluster;
        let [one, two] = followers;
        let nodes = [
            tokio::spawn(path::follower(one.listener, one.wal, one.ledger)),
            tokio::spawn(path::follower(two.listener, two.wal, two.ledger)),
            tokio::spawn(path::leader(
                leader.listener,
                follower_addresses,
                leader.wal,
                leader.ledger,
            )),
        ];
        let measured = tokio::spawn(path::client(leader_address, plan)).await;
        let measured = measured.map_err(std::io::Error::other)?;
        for node in nodes {
            node.await.map_err(std::io::Error::other)??;
        }
        measured
    })
}

/// Every party on a thread of its own; waits for all of them to end.
fn thread_per_node(cluster: Cluster, plan: Plan) -> std::io::Result<Measured> {
    let leader_address = cluster.leader.listener.local_addr()?;
    let follower_addresses = follower_addresses(&cluster)?;
    let Cluster { leader, followers } = cluster;
    let [one, two] = followers;
    let nodes = [
        on_own_thread("floor-f1", move || {
            path::follower(one.listener, one.wal, one.ledger)
        })?,
        on_own_thread("floor-f2", move || {
            path::follower(two.listener, two.wal, two.ledger)
        })?,
        on_own_thread("floor-leader", move || {
            path::leader(
                leader.listener,
                follower_addresses,
                leader.wal,
                leader.ledger,
            )
        })?,
    ];
    let measured = joined(on_own_thread("floor-client", move || {
        path::client(leader_address, plan)
    })?);
    for node in nodes {
        joined(node)?;
    }
    measured
}

/// The followers' addresses, for the leader to connect to.
fn follower_addresses(cluster: &Cluster) -> std::io::Result<[SocketAddr; 2]> {
    let [one, two] = &cluster.followers;
    Ok([one.listener.local_addr()?, two.listener.local_addr()?])
}

/// Starts a thread called `name` that runs the future `make` returns on a current-thread
/// runtime of its own.
fn on_own_thread<F, T>(
    name: &str,
    make: impl FnOnce() -> F + Send + 'static,
) -> std::io::Result<JoinHandle<std::io::Result<T>>>
where
    F: Future<Output = std::io::Result<T>>,
    T: Send + 'static,
{
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let runtime = Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(make())
        })
}

/// A thread's result, a panic turned into an error.
fn joined<T>(thread: JoinHandle<std::io::Result<T>>) -> std::io::Result<T> {
    let name = thread.thread().name().unwrap_or("a thread").to_string();
    thread
        .join()
        .map_err(|_| std::io::Error::other(format!("{name} panicked")))?
}
