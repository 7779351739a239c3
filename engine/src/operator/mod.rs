//! The operator's files, apart from the IO shell that runs a node: the cluster file every
//! node and operator reads, the client files given to application and operator hosts, the
//! secrets and how they are read, the data directory's own files (lock, identity, mode,
//! quarantine), and backups. `engine::node` re-exports them where a node's configuration
//! needs them.

pub mod backup;
pub mod client_file;
pub mod cluster_file;
pub mod data_dir;
pub mod secrets;

pub use client_file::{ClientFile, ClientNode};
pub use cluster_file::{ClusterFile, ClusterFileError, ModeSetting, NodeEntry};
