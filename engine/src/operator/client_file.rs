//! The client file: what a client host needs to reach a cluster, and nothing more. The
//! cluster's id, each node's client address and the client secret when the cluster sets one;
//! never the peer secret, which lets its holder pose as a node. `client-file --cluster F
//! --out FILE` writes it from a cluster file; `client`, `bench` and `status` read either kind.
//!
//! ```toml
//! cluster_id = 1
//! client_secret = "..."          # only when the cluster file sets one (or client_secret_file)
//! tls_ca_file = "/etc/bank/ca.pem"   # only when the cluster speaks TLS
//! tls_cert_file = "/etc/bank/app.pem"   # optional: this client's own certificate...
//! tls_key_file = "/etc/bank/app.key"    # ...and its key (owner-only)
//! [[nodes]]
//! id = 1
//! client_address = "node1.example:8001"
//! ```

use super::cluster_file::{ClusterFile, ClusterFileError};
use super::secrets::{self, SecretError, SecretSource, SecretText};
use crate::address::Address;
use crate::client::ClientConfig;
use net::auth::{Key, OperatorKey};
use net::tls::{Tls, TlsFiles};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One node as a client reaches it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientNode {
    /// The node's id.
    pub id: u8,
    /// Where clients reach it.
    pub client_address: Address,
}

/// The whole client file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientFile {
    /// The cluster's id.
    #[serde(default = "default_cluster_id")]
    pub cluster_id: u64,
    /// The secret clients prove, when the cluster sets one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<SecretText>,
    /// A file holding the client secret (owner-only), instead of `client_secret`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret_file: Option<PathBuf>,
    /// The cluster's CA certificate (PEM): set when the cluster speaks TLS; each node's
    /// certificate must chain to it and name the address dialed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca_file: Option<PathBuf>,
    /// This client's own certificate (PEM, signed by the CA), when it presents one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert_file: Option<PathBuf>,
    /// The private key of `tls_cert_file` (PEM, owner-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key_file: Option<PathBuf>,
    /// The nodes.
    pub nodes: Vec<ClientNode>,
    /// Read from an operator's copy of the cluster file (no client secret in it): its
    /// operator key, proved in place of a client key, so that the nodes refuse the file's
    /// business requests naming the operator credential (`Refusal::Forbidden`) rather than
    /// take it for an application's. Never written.
    #[serde(skip)]
    pub(crate) operator_key: Option<OperatorKey>,
}

fn default_cluster_id() -> u64 {
    1
}

impl ClientFile {
    /// Reads a client file, or a cluster file (taking what a client needs from it): checked
    /// either way, every error found.
    pub fn read(path: &Path) -> Result<Self, ClusterFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ClusterFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let file = match toml::from_str::<ClientFile>(&text) {
            Ok(file) => file,
            Err(as_client) => match ClusterFile::from_toml(&text) {
                Ok(_) => return ClientFile::of_cluster_file(&ClusterFile::read(path)?),
                Err(as_cluster) => {
                    return Err(ClusterFileError::Parse {
                        path: path.to_path_buf(),
                        message: format!(
                            "neither a cluster file ({}) nor a client file ({})",
                            as_cluster.to_string().trim(),
                            as_client.to_string().trim()
                        ),
                    });
                }
            },
        };
        let errors = file.errors();
        if !errors.is_empty() {
            return Err(ClusterFileError::Invalid {
                path: path.to_path_buf(),
                errors,
            });
        }
        Ok(file)
    }

    /// What a client needs of a cluster file; from an operator's copy (no peer or client
    /// secret), its operator key too.
    fn of_cluster_file(cluster: &ClusterFile) -> Result<Self, ClusterFileError> {
        let mut file = cluster.client_file()?;
        if file.client_secret.is_none() && cluster.peer_ring()?.is_none() {
            file.operator_key = cluster.operator_config().ok().map(|config| config.key);
        }
        Ok(file)
    }

    /// Every error: no nodes, an id or an address twice, a short client secret.
    pub fn errors(&self) -> Vec<String> {
        let mut errors = Vec::new();
        if self.nodes.is_empty() {
            errors.push("no nodes are listed".to_string());
        }
        for (n, node) in self.nodes.iter().enumerate() {
            let earlier = &self.nodes[..n];
            if earlier.iter().any(|e| e.id == node.id) {
                errors.push(format!("node id {} is listed twice", node.id));
            }
            if earlier
                .iter()
                .any(|e| e.client_address == node.client_address)
            {
                errors.push(format!("address {} is listed twice", node.client_address));
            }
        }
        if let Err(error) = self.client_key() {
            errors.push(error.to_string());
        }
        if let Err(error) = self.tls() {
            errors.push(error.to_string());
        }
        errors
    }

    /// TLS as this file sets it up; `None` when it names no CA.
    pub fn tls(&self) -> Result<Option<Tls>, ClusterFileError> {
        let Some(ca) = &self.tls_ca_file else {
            if self.tls_cert_file.is_some() || self.tls_key_file.is_some() {
                return Err(ClusterFileError::TlsWithoutCa);
            }
            return Ok(None);
        };
        let files = TlsFiles {
            ca: ca.clone(),
            cert: self.tls_cert_file.clone(),
            key: self.tls_key_file.clone(),
            require_client_cert: false,
        };
        Ok(Some(Tls::load(&files)?))
    }

    fn secret(&self) -> SecretSource<'_> {
        SecretSource {
            field: "client_secret",
            inline: self.client_secret.as_deref(),
            file: self.client_secret_file.as_deref(),
        }
    }

    /// The client key, when the file gives a client secret.
    fn client_key(&self) -> Result<Option<Key>, SecretError> {
        let none = SecretSource {
            field: "previous_client_secret",
            inline: None,
            file: None,
        };
        let keys = secrets::keys(self.secret(), none, Key::client)?;
        Ok(keys.map(|(key, _)| key))
    }

    /// Fills the client secret from [`secrets::CLIENT_SECRET_ENV`] (as `lookup` reads it)
    /// when the file does not set it; an error when it does.
    pub fn take_environment(
        &mut self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<(), ClusterFileError> {
        let set = ("client_secret", self.secret().is_set());
        let variable = secrets::CLIENT_SECRET_ENV;
        secrets::from_environment(set, &mut self.client_secret, variable, &lookup)?;
        Ok(())
    }

    /// How a client reaches the cluster.
    pub fn client_config(&self) -> Result<ClientConfig, ClusterFileError> {
        let addresses = self.nodes.iter().map(|n| n.client_address.clone());
        let mut config = ClientConfig::new(self.cluster_id, addresses);
        let operator = self.operator_key.as_ref().map(|key| key.key().clone());
        config.key = self.client_key()?.or(operator);
        config.tls = self.tls()?;
        Ok(config)
    }

    /// The file's text.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a client file is plain data")
    }

    /// Writes the file to `path` durably and owner-only (it may hold the client secret),
    /// refusing to replace a file unless `force`.
    pub fn write(&self, path: &Path, force: bool) -> Result<(), ClusterFileError> {
        let write_error = |source| ClusterFileError::Write {
            path: PathBuf::from(path),
            source,
        };
        let text = self.to_toml();
        let written = match force {
            true => crate::storage::files::write_durably(path, text.as_bytes()),
            false => crate::storage::files::write_new(path, text.as_bytes()),
        };
        written.map_err(|error| write_error(error.source))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::NodeEntry;

    fn cluster() -> ClusterFile {
        let node = |id: u8| {
            NodeEntry::new(
                id,
                format!("node{id}.example:7001").parse::<Address>().unwrap(),
                format!("node{id}.example:8001").parse::<Address>().unwrap(),
                format!("/tmp/n{id}"),
            )
        };
        let mut file = ClusterFile::new("the peers' secret, 16+", (1..=3).map(node).collect());
        file.cluster_id = 9;
        file.client_secret = Some("the clients' secret".into());
        file
    }

    /// Proves the client file of a cluster file holds the id, the client addresses and the
    /// client secret, not the peer secret, and reads back the same client configuration.
    #[test]
    fn holds_no_peer_secret() {
        let file = cluster();
        let client = file.client_file().unwrap();
        let text = client.to_toml();
        assert!(!text.contains("peers"), "{text}");
        assert!(text.contains("the clients' secret"), "{text}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client.toml");
        client.write(&path, false).unwrap();
        let read = ClientFile::read(&path).unwrap();
        assert_eq!(read, client);
        let config = read.client_config().unwrap();
        assert_eq!(config.cluster_id, 9);
        assert_eq!(config.nodes[2].as_str(), "node3.example:8001");
        assert!(config.key.is_some());
        let again = client.write(&path, false).unwrap_err();
        assert!(matches!(again, ClusterFileError::Write { .. }), "{again}");
        client.write(&path, true).unwrap();
    }

    /// Proves a cluster file is read as its client file, and a file of neither kind, or with
    /// a repeated node, is refused with its reason.
    #[test]
    fn reads_either_kind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.toml");
        cluster().write(&path).unwrap();
        assert_eq!(
            ClientFile::read(&path).unwrap(),
            cluster().client_file().unwrap()
        );
        std::fs::write(&path, "cluster_id = 1\ncolour = 3\n").unwrap();
        let error = ClientFile::read(&path).unwrap_err().to_string();
        assert!(error.contains("neither a cluster file"), "{error}");
        let mut twice = cluster().client_file().unwrap();
        twice.nodes[1] = twice.nodes[0].clone();
        std::fs::write(&path, twice.to_toml()).unwrap();
        let error = ClientFile::read(&path).unwrap_err().to_string();
        assert!(error.contains("node id 1 is listed twice"), "{error}");
        assert!(
            error.contains("node1.example:8001 is listed twice"),
            "{error}"
        );
    }

    /// Proves the two files are told apart by their keys: a client file where a cluster file
    /// is needed is named as one (not a missing `peer_address`); an operator's copy read as a
    /// client file proves its operator key (which the nodes refuse business requests by
    /// name), while a cluster file with its peer secret proves the client key or nothing.
    #[test]
    fn each_file_is_known_by_its_keys() {
        let dir = tempfile::tempdir().unwrap();
        let client = dir.path().join("client.toml");
        cluster()
            .client_file()
            .unwrap()
            .write(&client, false)
            .unwrap();
        let error = ClusterFile::read(&client).unwrap_err();
        assert!(
            matches!(error, ClusterFileError::ClientFileGiven { .. }),
            "{error}"
        );
        assert!(
            error.to_string().contains("client-file --operator"),
            "{error}"
        );
        let mut file = cluster();
        file.client_secret = None;
        file.operator_secret = Some("only the operators hold this".into());
        let operator = dir.path().join("operator.toml");
        file.operator_file().unwrap().write(&operator).unwrap();
        let config = ClientFile::read(&operator)
            .unwrap()
            .client_config()
            .unwrap();
        let key = Key::operator(b"only the operators hold this").unwrap();
        assert_eq!(config.key.as_ref(), Some(key.key()));
        let whole = dir.path().join("cluster.toml");
        file.write(&whole).unwrap();
        let config = ClientFile::read(&whole).unwrap().client_config().unwrap();
        assert_eq!(config.key, None);
    }
}
