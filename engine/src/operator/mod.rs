//! The operator's files, above the IO shell that runs a node: the cluster file every node and
//! operator reads (it builds a [`crate::node::NodeConfig`]), the client files given to
//! application and operator hosts, the secrets and how they are read, and backups. Their
//! bytes reach the disk through [`crate::storage`], as every durable byte does; the node's
//! own code uses nothing of this module.

pub mod backup;
pub mod client_file;
pub mod cluster_file;
pub mod secrets;

pub use client_file::{ClientFile, ClientNode};
pub use cluster_file::{ClusterFile, ClusterFileError, ModeSetting, NodeEntry};
