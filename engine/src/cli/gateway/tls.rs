//! The gateway's TLS options, checked together and loaded through `net::tls` (the same PEM
//! reading, key checks and TLS 1.3 as the cluster's links): a certificate and key make the
//! listener speak TLS only; a client CA then requires each caller's certificate.

use super::GatewayArgs;
use net::tls::{HttpAcceptor, HttpFiles, TlsError};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds a caller has to finish its TLS handshake before its connection is closed: ample for
/// a far caller's three round trips, short enough that stalled handshakes cannot hold the
/// connection places (`GATEWAY_CONNECTIONS_MAX`) for long.
pub const GATEWAY_TLS_HANDSHAKE_S: u64 = 10;

/// Why the gateway's TLS options cannot be served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GatewayTlsError {
    /// A certificate without its key.
    #[error("--tls-cert-file needs --tls-key-file (the certificate's private key)")]
    CertWithoutKey,
    /// A key without its certificate.
    #[error("--tls-key-file needs --tls-cert-file (the certificate it is the key of)")]
    KeyWithoutCert,
    /// Callers' certificates asked for on a listener in clear.
    #[error(
        "--tls-client-ca-file needs --tls-cert-file and --tls-key-file: callers present \
         certificates only to a TLS listener"
    )]
    ClientCaWithoutTls,
    /// The files do not load (unreadable, not PEM, a key open to others, a key that is not
    /// the certificate's). Not a source: its message already holds its own source's, and a
    /// chain would print it twice.
    #[error("the gateway's TLS: {0}")]
    Load(TlsError),
    /// The certificate is expired or not valid yet: every caller would refuse it.
    #[error("--tls-cert-file {}: the certificate is {problem}", path.display())]
    Invalid {
        /// The certificate.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
}

/// The listener's TLS from the gateway's options, checked and loaded at `now`; `None` for a
/// listener in clear.
pub fn from_options(
    args: &GatewayArgs,
    now: SystemTime,
) -> Result<Option<HttpAcceptor>, GatewayTlsError> {
    let files = files(
        args.tls_cert_file.as_deref(),
        args.tls_key_file.as_deref(),
        args.tls_client_ca_file.as_deref(),
    )?;
    let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    files.map(|files| load(&files, now)).transpose()
}

/// The listener's TLS files from the options, or `None` for a listener in clear.
fn files(
    cert: Option<&Path>,
    key: Option<&Path>,
    client_ca: Option<&Path>,
) -> Result<Option<HttpFiles>, GatewayTlsError> {
    match (cert, key, client_ca) {
        (Some(cert), Some(key), client_ca) => Ok(Some(HttpFiles {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            client_ca: client_ca.map(Path::to_path_buf),
        })),
        (None, None, None) => Ok(None),
        (Some(_), None, _) => Err(GatewayTlsError::CertWithoutKey),
        (None, Some(_), _) => Err(GatewayTlsError::KeyWithoutCert),
        (None, None, Some(_)) => Err(GatewayTlsError::ClientCaWithoutTls),
    }
}

/// Loads the listener's TLS from `files`, at `now` (Unix seconds): refused when the
/// certificate is expired or not valid yet, a warning logged when it ends within
/// `net::tls::CERTIFICATE_WARN_DAYS`.
fn load(files: &HttpFiles, now: i64) -> Result<HttpAcceptor, GatewayTlsError> {
    let acceptor = HttpAcceptor::load(files).map_err(GatewayTlsError::Load)?;
    match acceptor.certificate().problem_at(now) {
        Some((true, problem)) => {
            return Err(GatewayTlsError::Invalid {
                path: files.cert.clone(),
                problem,
            });
        }
        Some((false, warning)) => {
            tracing::warn!(cert = %files.cert.display(), "gateway: the TLS certificate {warning}");
        }
        None => {}
    }
    Ok(acceptor)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves each combination of the options is served or refused with its own error.
    #[test]
    fn option_combinations() {
        let (c, k, a) = (
            Some(Path::new("c")),
            Some(Path::new("k")),
            Some(Path::new("a")),
        );
        assert!(files(None, None, None).unwrap().is_none());
        let plain = files(c, k, None).unwrap().unwrap();
        assert_eq!(plain.client_ca, None);
        let mutual = files(c, k, a).unwrap().unwrap();
        assert_eq!(mutual.client_ca.as_deref(), a);
        let refused = |cert, key, ca| files(cert, key, ca).unwrap_err().to_string();
        assert!(refused(c, None, None).contains("needs --tls-key-file"));
        assert!(refused(c, None, a).contains("needs --tls-key-file"));
        assert!(refused(None, k, None).contains("needs --tls-cert-file"));
        assert!(refused(None, k, a).contains("needs --tls-cert-file"));
        assert!(refused(None, None, a).contains("--tls-client-ca-file needs"));
    }
}
