//! TLS for `runner local --tls`: a throwaway CA and a certificate per node, made with the
//! very openssl script `notes/operations.md` teaches (`runner/scripts/tls-certs.sh`), in the
//! run's directory.

use anyhow::{Context, bail};
use net::tls::{Tls, TlsFiles};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The certificate script, as shipped beside the binary's sources.
pub const CERTS_SCRIPT: &str = include_str!("../../scripts/tls-certs.sh");

/// Runs the certificate script: a certificate `name` in `dir` for `hosts` (the CA is made
/// first when `dir` has none).
pub fn make_certificate(dir: &Path, name: &str, hosts: &[&str]) -> anyhow::Result<()> {
    let output = Command::new("sh")
        .arg("-c")
        .arg(CERTS_SCRIPT)
        .arg("tls-certs.sh")
        .arg(dir)
        .arg(name)
        .args(hosts)
        .output()
        .context("running sh for the certificate script (it needs openssl)")?;
    if !output.status.success() {
        bail!(
            "the certificate script failed for {name}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// The certificates of a cluster of nodes on this machine (127.0.0.1).
pub struct LocalCertificates {
    dir: PathBuf,
}

impl LocalCertificates {
    /// A CA and a certificate for each of nodes `1..=count`, in `dir`.
    pub fn make(dir: &Path, count: u8) -> anyhow::Result<Self> {
        for id in 1..=count {
            make_certificate(dir, &format!("node{id}"), &["127.0.0.1", "localhost"])?;
        }
        Ok(LocalCertificates {
            dir: dir.to_path_buf(),
        })
    }

    /// Node `id`'s TLS: its certificate and key, and the CA.
    pub fn node(&self, id: u8) -> anyhow::Result<Tls> {
        let files = TlsFiles {
            ca: self.dir.join("ca.pem"),
            cert: Some(self.dir.join(format!("node{id}.pem"))),
            key: Some(self.dir.join(format!("node{id}.key"))),
            require_client_cert: false,
        };
        Ok(Tls::load(&files)?)
    }
}
