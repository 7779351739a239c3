//! `client-file --cluster F --out FILE`: writes what a client host needs (the cluster's id,
//! the client addresses, the client secret when set) and not the peer secret. `client`,
//! `bench` and `status` read it where they read a cluster file.

use crate::node::ClusterFile;
use clap::Args;
use std::path::PathBuf;

/// Options of `client-file`.
#[derive(Args, Debug)]
pub struct ClientFileArgs {
    /// The cluster file.
    #[arg(long)]
    pub cluster: PathBuf,
    /// The client file to write (refused if it exists, unless --force).
    #[arg(long)]
    pub out: PathBuf,
    /// Replace the file at --out.
    #[arg(long)]
    pub force: bool,
}

/// Writes the client file of `args.cluster` to `args.out`, durably.
pub fn client_file(args: ClientFileArgs) -> anyhow::Result<()> {
    let file = ClusterFile::read(&args.cluster)?;
    let client = file.client_file();
    client.write(&args.out, args.force)?;
    println!(
        "{}: cluster {}, {} nodes, client secret {}; no peer secret",
        args.out.display(),
        client.cluster_id,
        client.nodes.len(),
        if client.client_secret.is_some() {
            "included"
        } else {
            "not set"
        }
    );
    Ok(())
}
