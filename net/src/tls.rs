//! TLS on every link, with rustls (TLS 1.3 only, the ring provider): a cluster's own CA signs
//! every node's certificate. Nodes present theirs on both ports; on the peer port the node
//! that dials presents its own too and the listener requires it (mutual TLS); on the client
//! port a client may present one (signed by the same CA), and a connection without one is
//! left to the handshake's client secret. Whoever dials verifies the listener's certificate
//! against the CA and the name it dialed (the host of `peer_address` or `client_address`).
//!
//! The handshake of [`crate::auth`] still runs inside TLS: TLS proves the machine and
//! protects every byte; the secrets prove the role (peer, operator, application).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Most bytes a PEM file (a CA bundle, a certificate chain, a key) may hold.
pub const PEM_FILE_BYTES_MAX: u64 = 1024 * 1024;
/// Days before its end that a certificate is reported as ending soon.
pub const CERTIFICATE_WARN_DAYS: i64 = 30;
/// Seconds in a day.
const DAY_SECONDS: i64 = 86_400;

/// Why TLS cannot be set up from the files given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file cannot be read.
    #[error("{key} {}: {source}", path.display())]
    Read {
        /// The key that names the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file is larger than any PEM file this needs.
    #[error("{key} {}: over {PEM_FILE_BYTES_MAX} bytes, not a PEM file", path.display())]
    TooLarge {
        /// The key that names the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// A file holds no PEM item of the kind its key needs.
    #[error("{key} {}: no {what} in it (PEM expected)", path.display())]
    Missing {
        /// The key that names the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// What was looked for.
        what: &'static str,
    },
    /// A file's PEM or DER does not parse.
    #[error("{key} {}: {reason}", path.display())]
    Unparsable {
        /// The key that names the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// The parser's message.
        reason: String,
    },
    /// The private key's file may be read by other users.
    #[error(
        "tls_key_file {} may be read by other users (mode {mode:o}): run chmod 600 on it",
        path.display()
    )]
    KeyOpenToOthers {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A certificate without its key, or a key without its certificate.
    #[error("tls_cert_file and tls_key_file go together: set both or neither")]
    HalfIdentity,
    /// rustls refused the configuration (a key that does not match its certificate, say).
    #[error("{context}: {reason}")]
    Rustls {
        /// What was being set up.
        context: String,
        /// rustls's message.
        reason: String,
    },
    /// The certificate is not one the others accept (another CA's, expired, not naming the
    /// host).
    #[error("tls_cert_file {}: refused as {role}: {reason}", path.display())]
    Rejected {
        /// The certificate.
        path: PathBuf,
        /// As what it was checked.
        role: String,
        /// The verifier's message.
        reason: String,
    },
    /// A name that cannot be a TLS server name.
    #[error("{name:?} cannot be checked against a certificate: {reason}")]
    BadName {
        /// The name.
        name: String,
        /// Why.
        reason: String,
    },
}

/// The files a process's TLS comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The cluster's CA certificates (PEM; more than one during a CA rotation).
    pub ca: PathBuf,
    /// This process's certificate chain (PEM), leaf first: a node's always, a client's when
    /// it presents one.
    pub cert: Option<PathBuf>,
    /// The private key of `cert` (PEM, owner-only).
    pub key: Option<PathBuf>,
    /// A listener's client port refuses a client that presents no certificate the CA signed
    /// (otherwise a client may present one, verified when it does).
    pub require_client_cert: bool,
}

/// A process's TLS, set up from its files: what it dials with and, given its own
/// certificate, what it accepts with on each port.
#[derive(Clone)]
pub struct Tls {
    dial: tokio_rustls::TlsConnector,
    dial_config: Arc<ClientConfig>,
    peer_port: Option<tokio_rustls::TlsAcceptor>,
    client_port: Option<tokio_rustls::TlsAcceptor>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("accepts", &self.peer_port.is_some())
            .finish_non_exhaustive()
    }
}

/// Which port a TLS connection is accepted on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsPort {
    /// The peer port: the dialing node's certificate is required.
    Peer,
    /// The client port: a client's certificate is verified when it presents one.
    Client,
}

/// The ring provider: X25519 and the NIST curves, AES-GCM and ChaCha20-Poly1305. rustls
/// marks it deprecated for its lack of post-quantum key exchange; aws-lc-rs, which has it,
/// builds a C library of its own (`notes/decisions/access.md`).
#[allow(deprecated)]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn rustls_error(context: impl Into<String>) -> impl FnOnce(rustls::Error) -> TlsError {
    move |error| TlsError::Rustls {
        context: context.into(),
        reason: error.to_string(),
    }
}

/// Reads a PEM file of at most [`PEM_FILE_BYTES_MAX`].
fn read_pem(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    let read = |source| TlsError::Read {
        key,
        path: path.to_path_buf(),
        source,
    };
    if std::fs::metadata(path).map_err(read)?.len() > PEM_FILE_BYTES_MAX {
        return Err(TlsError::TooLarge {
            key,
            path: path.to_path_buf(),
        });
    }
    std::fs::read(path).map_err(read)
}

/// Every certificate in the PEM file `path`, named by `key`.
pub fn read_certificates(
    key: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read_pem(key, path)?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsError::Unparsable {
            key,
            path: path.to_path_buf(),
            reason: error.to_string(),
        })?;
    if certificates.is_empty() {
        return Err(TlsError::Missing {
            key,
            path: path.to_path_buf(),
            what: "certificate",
        });
    }
    Ok(certificates)
}

/// The private key in the PEM file `path`, which must be its owner's alone.
fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    if let Some(mode) = open_to_others(path) {
        return Err(TlsError::KeyOpenToOthers {
            path: path.to_path_buf(),
            mode,
        });
    }
    let bytes = read_pem("tls_key_file", path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|error| {
        if let rustls::pki_types::pem::Error::NoItemsFound = error {
            return TlsError::Missing {
                key: "tls_key_file",
                path: path.to_path_buf(),
                what: "private key",
            };
        }
        TlsError::Unparsable {
            key: "tls_key_file",
            path: path.to_path_buf(),
            reason: error.to_string(),
        }
    })
}

/// The permission bits of `path` when the group or others may read it.
fn open_to_others(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & 0o077 != 0).then_some(mode)
}

/// The CA's certificates as a root store.
fn roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    roots_named("tls_ca_file", path)
}

/// The certificates of the PEM file `path`, named by `key`, as a root store.
fn roots_named(key: &'static str, path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut store = RootCertStore::empty();
    for certificate in read_certificates(key, path)? {
        store
            .add(certificate)
            .map_err(rustls_error(format!("{key} {}", path.display())))?;
    }
    Ok(Arc::new(store))
}

/// A certificate chain and its key, checked to belong together.
type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

fn identity(files: &TlsFiles) -> Result<Option<Identity>, TlsError> {
    let (cert, key) = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => (cert, key),
        (None, None) => return Ok(None),
        (Some(_), None) | (None, Some(_)) => return Err(TlsError::HalfIdentity),
    };
    let chain = read_certificates("tls_cert_file", cert)?;
    let private = read_key(key)?;
    let provider = provider();
    let signing = provider
        .key_provider
        .load_private_key(private.clone_key())
        .map_err(rustls_error(format!("tls_key_file {}", key.display())))?;
    let certified = rustls::sign::CertifiedKey::new(chain.clone(), signing);
    certified.keys_match().map_err(rustls_error(format!(
        "tls_key_file {} and tls_cert_file {}",
        key.display(),
        cert.display()
    )))?;
    Ok(Some((chain, private)))
}

impl Tls {
    /// Sets up TLS from `files`: the CA, and the process's own certificate when it has one
    /// (a node always does; without it nothing is accepted).
    pub fn load(files: &TlsFiles) -> Result<Tls, TlsError> {
        let roots = roots(&files.ca)?;
        let identity = identity(files)?;
        let versions = [&rustls::version::TLS13];
        let builder = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&versions)
            .map_err(rustls_error("TLS versions"))?
            .with_root_certificates(roots.clone());
        let dial_config = match &identity {
            Some((chain, key)) => builder
                .with_client_auth_cert(chain.clone(), key.clone_key())
                .map_err(rustls_error("the client certificate"))?,
            None => builder.with_no_client_auth(),
        };
        let dial_config = Arc::new(dial_config);
        let (peer_port, client_port) = match &identity {
            Some(identity) => (
                Some(acceptor(&roots, identity, TlsPort::Peer, true)?),
                Some(acceptor(
                    &roots,
                    identity,
                    TlsPort::Client,
                    files.require_client_cert,
                )?),
            ),
            None => (None, None),
        };
        Ok(Tls {
            dial: tokio_rustls::TlsConnector::from(dial_config.clone()),
            dial_config,
            peer_port,
            client_port,
        })
    }

    /// Opens TLS on `stream`, dialed to `host` (a name or an address, as the cluster file
    /// gives it): the listener's certificate must be the CA's and name `host`.
    pub async fn connect(&self, host: &str, stream: TcpStream) -> std::io::Result<Stream> {
        let name = server_name(host).map_err(std::io::Error::other)?;
        let tls = self.dial.connect(name, stream).await?;
        Ok(Stream::Tls(Box::new(tokio_rustls::TlsStream::Client(tls))))
    }

    /// Opens TLS on a blocking `stream` dialed to `host`, as [`Tls::connect`] does.
    /// Each read and write is bounded by the socket's own timeouts, and the whole handshake
    /// by `limit`.
    pub fn connect_blocking(
        &self,
        host: &str,
        stream: std::net::TcpStream,
        limit: std::time::Duration,
    ) -> std::io::Result<BlockingTls> {
        let name = server_name(host).map_err(std::io::Error::other)?;
        let connection = rustls::ClientConnection::new(self.dial_config.clone(), name)
            .map_err(std::io::Error::other)?;
        let mut stream = rustls::StreamOwned::new(connection, stream);
        let started = std::time::Instant::now();
        // Finish the TLS handshake now, so that a refused certificate is an error here.
        while stream.conn.is_handshaking() {
            if started.elapsed() > limit {
                return Err(std::io::ErrorKind::TimedOut.into());
            }
            stream.conn.complete_io(&mut stream.sock)?;
        }
        Ok(stream)
    }

    /// Accepts TLS on `stream`, which came to `port`. An error when this process has no
    /// certificate of its own.
    pub async fn accept(&self, port: TlsPort, stream: TcpStream) -> std::io::Result<Stream> {
        let acceptor = match port {
            TlsPort::Peer => &self.peer_port,
            TlsPort::Client => &self.client_port,
        };
        let acceptor = acceptor.as_ref().ok_or_else(|| {
            std::io::Error::other("no certificate of this process's own to accept TLS with")
        })?;
        let tls = acceptor.accept(stream).await?;
        Ok(Stream::Tls(Box::new(tokio_rustls::TlsStream::Server(tls))))
    }
}

/// A blocking TLS connection (the WAL thread's acknowledgements).
pub type BlockingTls = rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>;

/// Writes `bytes` on a blocking TLS connection and sends every record they make, within the
/// socket's write timeout, or fails. Only writes: rustls's `Write` would also read (on a
/// timeout meant for the handshake) and report success for bytes it still holds, which a
/// failed send would then lose unseen.
pub fn write_blocking(tls: &mut BlockingTls, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    tls.conn.writer().write_all(bytes)?;
    while tls.conn.wants_write() {
        if tls.conn.write_tls(&mut tls.sock)? == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
    }
    Ok(())
}

/// The acceptor of `port`: the node's certificate; the dialer's certificate required when
/// `required` (always on the peer port), verified whenever presented.
fn acceptor(
    roots: &Arc<RootCertStore>,
    (chain, key): &Identity,
    port: TlsPort,
    required: bool,
) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
    let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider());
    let verifier = match (port, required) {
        (TlsPort::Peer, _) | (TlsPort::Client, true) => verifier,
        (TlsPort::Client, false) => verifier.allow_unauthenticated(),
    };
    let verifier = verifier.build().map_err(|error| TlsError::Rustls {
        context: "the client certificate verifier".into(),
        reason: error.to_string(),
    })?;
    let config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(rustls_error("TLS versions"))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(rustls_error("the node's certificate"))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// The ALPN protocols an HTTP listener offers, preferred first: HTTP/2, then HTTP/1.1.
pub const HTTP_ALPN_PROTOCOLS: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// The files of a TLS listener for HTTP callers (the gateway's): its own certificate and key,
/// and the CA whose certificate every caller must present, when callers need one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpFiles {
    /// The listener's certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// The private key of `cert` (PEM, owner-only).
    pub key: PathBuf,
    /// The CA that signs the callers' certificates (mutual TLS); `None` asks callers for none.
    pub client_ca: Option<PathBuf>,
}

/// A TLS listener for HTTP callers: TLS 1.3, ALPN [`HTTP_ALPN_PROTOCOLS`], and the caller's
/// certificate required when its files name a client CA.
#[derive(Clone)]
pub struct HttpAcceptor {
    acceptor: tokio_rustls::TlsAcceptor,
    /// The facts of the listener's own certificate (the leaf).
    facts: CertificateFacts,
}

impl std::fmt::Debug for HttpAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpAcceptor")
            .field("subject", &self.facts.subject)
            .finish_non_exhaustive()
    }
}

impl HttpAcceptor {
    /// Loads `files` as [`Tls::load`] loads a node's: bounded PEM files, an owner-only key
    /// that matches its certificate, the client CA's certificates.
    pub fn load(files: &HttpFiles) -> Result<HttpAcceptor, TlsError> {
        let own = TlsFiles {
            ca: PathBuf::new(),
            cert: Some(files.cert.clone()),
            key: Some(files.key.clone()),
            require_client_cert: files.client_ca.is_some(),
        };
        let (chain, key) = identity(&own)?.expect("a certificate and a key are given");
        let leaf = chain.first().expect("read_certificates finds one");
        let facts = certificate_facts(leaf).map_err(|error| TlsError::Unparsable {
            key: "tls_cert_file",
            path: files.cert.clone(),
            reason: error.to_string(),
        })?;
        let builder = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(rustls_error("TLS versions"))?;
        let builder = match &files.client_ca {
            Some(ca) => {
                let roots = roots_named("tls_client_ca_file", ca)?;
                let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider())
                    .build()
                    .map_err(|error| TlsError::Rustls {
                        context: "the caller certificate verifier".into(),
                        reason: error.to_string(),
                    })?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(rustls_error("the listener's certificate"))?;
        config.alpn_protocols = HTTP_ALPN_PROTOCOLS.iter().map(|p| p.to_vec()).collect();
        Ok(HttpAcceptor {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            facts,
        })
    }

    /// The facts of the listener's own certificate (to warn of its end).
    pub fn certificate(&self) -> &CertificateFacts {
        &self.facts
    }

    /// Runs the server's side of the TLS handshake on `stream` (unbounded in time: the
    /// caller bounds it).
    pub async fn accept(&self, stream: TcpStream) -> std::io::Result<Stream> {
        let tls = self.acceptor.accept(stream).await?;
        Ok(Stream::Tls(Box::new(tokio_rustls::TlsStream::Server(tls))))
    }
}

/// The name a certificate must hold for `host` (brackets of an IPv6 address dropped).
pub fn server_name(host: &str) -> Result<ServerName<'static>, TlsError> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    ServerName::try_from(bare.to_string()).map_err(|error| TlsError::BadName {
        name: host.to_string(),
        reason: error.to_string(),
    })
}

/// A connection, in clear or in TLS: what the handshake and the frames run over.
#[derive(Debug)]
pub enum Stream {
    /// No TLS (a cluster that sets none).
    Plain(TcpStream),
    /// TLS, dialed or accepted.
    Tls(Box<tokio_rustls::TlsStream<TcpStream>>),
}

impl Stream {
    /// The TCP socket underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(stream) => stream,
            Stream::Tls(tls) => tls.get_ref().0,
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_shutdown(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(stream) => stream.is_write_vectored(),
            Stream::Tls(tls) => tls.is_write_vectored(),
        }
    }
}

/// What `check` says of one certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertificateFacts {
    /// Its subject.
    pub subject: String,
    /// The names it holds (DNS names and IP addresses).
    pub names: Vec<String>,
    /// Its first valid second, in Unix seconds.
    pub not_before: i64,
    /// Its last valid second, in Unix seconds.
    pub not_after: i64,
}

impl CertificateFacts {
    /// What is wrong with it at `now` (Unix seconds), if anything: not valid yet, expired,
    /// or ending within [`CERTIFICATE_WARN_DAYS`] (a warning, not an error).
    pub fn problem_at(&self, now: i64) -> Option<(bool, String)> {
        if now < self.not_before {
            return Some((true, "not valid yet".into()));
        }
        if now > self.not_after {
            return Some((true, "expired".into()));
        }
        let days_left = (self.not_after - now) / DAY_SECONDS;
        (days_left < CERTIFICATE_WARN_DAYS).then(|| (false, format!("ends in {days_left} days")))
    }
}

/// Why a certificate's facts cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CertificateError {
    /// The bytes are not an X.509 certificate in DER.
    #[error(transparent)]
    NotX509(x509_parser::nom::Err<x509_parser::error::X509Error>),
}

/// The facts of the first certificate in `der`.
pub fn certificate_facts(der: &CertificateDer<'_>) -> Result<CertificateFacts, CertificateError> {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let (_, certificate) =
        X509Certificate::from_der(der.as_ref()).map_err(CertificateError::NotX509)?;
    let mut names = Vec::new();
    if let Ok(Some(extension)) = certificate.subject_alternative_name() {
        // Only the kinds of name a dialer checks; a certificate may hold others.
        for name in &extension.value.general_names {
            if let GeneralName::DNSName(dns) = name {
                names.push((*dns).to_string());
            } else if let GeneralName::IPAddress(bytes) = name {
                names.push(ip_text(bytes));
            }
        }
    }
    let validity = certificate.validity();
    Ok(CertificateFacts {
        subject: certificate.subject().to_string(),
        names,
        not_before: validity.not_before.timestamp(),
        not_after: validity.not_after.timestamp(),
    })
}

fn ip_text(bytes: &[u8]) -> String {
    match bytes.len() {
        4 => std::net::Ipv4Addr::from(<[u8; 4]>::try_from(bytes).expect("4 bytes")).to_string(),
        16 => std::net::Ipv6Addr::from(<[u8; 16]>::try_from(bytes).expect("16 bytes")).to_string(),
        _ => format!("{bytes:?}"),
    }
}

/// Checks that the certificate of `files` is one the others accept now, for each of `hosts`:
/// as a listener's (signed by the CA, valid, naming the host dialed) and as a dialing node's
/// (signed by the CA, valid, for client authentication).
pub fn verify_for_hosts(files: &TlsFiles, hosts: &[&str]) -> Result<(), TlsError> {
    use rustls::client::danger::ServerCertVerifier;
    let Some(path) = &files.cert else {
        return Err(TlsError::HalfIdentity);
    };
    let chain = read_certificates("tls_cert_file", path)?;
    let (leaf, intermediates) = chain.split_first().expect("read_certificates finds one");
    let roots = roots(&files.ca)?;
    let rejected = |role: &str| {
        let role = role.to_string();
        move |error: rustls::Error| TlsError::Rejected {
            path: path.clone(),
            role,
            reason: error.to_string(),
        }
    };
    let verifier_error = |error: rustls::server::VerifierBuilderError| TlsError::Rustls {
        context: "the certificate verifier".into(),
        reason: error.to_string(),
    };
    let now = rustls::pki_types::UnixTime::now();
    let servers =
        rustls::client::WebPkiServerVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(verifier_error)?;
    for host in hosts {
        let name = server_name(host)?;
        servers
            .verify_server_cert(leaf, intermediates, &name, &[], now)
            .map_err(rejected(&format!("a listener dialed at {host}")))?;
    }
    let clients = WebPkiClientVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(verifier_error)?;
    clients
        .verify_client_cert(leaf, intermediates, now)
        .map_err(rejected("a dialing node"))?;
    Ok(())
}

/// Checks a process's TLS files as a node would load them, and returns the facts of its
/// certificate (when it has one) and of the CA's.
pub fn inspect(
    files: &TlsFiles,
) -> Result<(Option<CertificateFacts>, Vec<CertificateFacts>), TlsError> {
    Tls::load(files)?;
    let facts = |key, path: &Path| -> Result<Vec<CertificateFacts>, TlsError> {
        let certificates = read_certificates(key, path)?;
        let parse = |der| {
            certificate_facts(der).map_err(|error| TlsError::Unparsable {
                key,
                path: path.to_path_buf(),
                reason: error.to_string(),
            })
        };
        certificates.iter().map(parse).collect()
    };
    let ca = facts("tls_ca_file", &files.ca)?;
    let own = match &files.cert {
        Some(path) => facts("tls_cert_file", path)?.into_iter().next(),
        None => None,
    };
    Ok((own, ca))
}
