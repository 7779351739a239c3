//! `client-file --cluster F --out FILE`: writes what a client host needs (the cluster's id,
//! the client addresses, the client secret when set) and neither the peer secret nor the
//! operator secret. `client`, `bench` and `status` read it where they read a cluster file.
//! With `--operator` it writes an operator host's copy of the cluster file instead: every
//! node and setting and the operator secret, without the peer and client secrets.

use clap::Args;
use std::path::PathBuf;

/// Options of `client-file`.
#[derive(Args, Debug)]
pub struct ClientFileArgs {
    /// The cluster file.
    #[arg(long, env = crate::cli::CLUSTER_FILE_ENV)]
    pub cluster: PathBuf,
    /// The client file to write (refused if it exists, unless --force).
    #[arg(long)]
    pub out: PathBuf,
    /// Replace the file at --out.
    #[arg(long)]
    pub force: bool,
    /// Write the operator file instead: the cluster file with the operator secret and without
    /// the peer and client secrets (the cluster file must set operator_secret).
    #[arg(long)]
    pub operator: bool,
    /// The client's own TLS certificate (PEM, signed by the cluster's CA), written into the
    /// client file beside the CA (a cluster that speaks TLS).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM, owner-only).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// What standard output holds once the file is written.
    #[command(flatten)]
    pub output: super::OutputArgs,
}

/// Writes the client file (or, with `--operator`, the operator file) of `args.cluster` to
/// `args.out`, durably and owner-only.
pub fn client_file(args: ClientFileArgs) -> anyhow::Result<()> {
    let file = super::read_cluster_file(&args.cluster)?;
    let out = args.out.display().to_string();
    if args.operator {
        let operator = file.operator_file()?;
        operator.write_to(&args.out, args.force)?;
        let (cluster, nodes) = (operator.cluster_id, operator.nodes.len());
        let json = serde_json::json!({
            "file": out, "kind": "operator", "cluster_id": cluster, "nodes": nodes,
            "operator_secret": true, "peer_secret": false, "client_secret": false,
        });
        return args.output.emit(&json, || {
            crate::outln!(
                "{out}: cluster {cluster}, {nodes} nodes, operator secret included; \
                 no peer or client secret"
            );
        });
    }
    let mut client = file.client_file()?;
    client.tls_cert_file = args.tls_cert;
    client.tls_key_file = args.tls_key;
    // The files it names must load, before anyone is handed it.
    client.tls()?;
    client.write(&args.out, args.force)?;
    let secret = client.client_secret.is_some();
    let tls = match (&client.tls_ca_file, &client.tls_cert_file) {
        (None, _) => "off",
        (Some(_), None) => "on",
        (Some(_), Some(_)) => "on, with a client certificate",
    };
    let (cluster, nodes) = (client.cluster_id, client.nodes.len());
    let json = serde_json::json!({
        "file": out, "kind": "client", "cluster_id": cluster, "nodes": nodes,
        "client_secret": secret, "peer_secret": false, "operator_secret": false, "tls": tls,
    });
    args.output.emit(&json, || {
        let secret = if secret { "included" } else { "not set" };
        crate::outln!(
            "{out}: cluster {cluster}, {nodes} nodes, client secret {secret}, TLS {tls}; \
             no peer or operator secret"
        );
    })
}
