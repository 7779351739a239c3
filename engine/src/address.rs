//! A node's address as an operator writes it: `host:port`, where the host is a name
//! (`node1.example`, `localhost`), an IPv4 address or a bracketed IPv6 address. Checked when
//! read, resolved only when a connection is made, and again at every reconnect, so that a
//! machine replaced behind the same name is found at its new address.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

/// Most bytes of an address as written (`host:port`): a DNS name is at most 253 bytes.
pub const ADDRESS_BYTES_MAX: usize = 255;

/// `host:port`, checked: the host is not empty, has no spaces and a bracketed IPv6 address is
/// well formed; the port is 1 to 65,535.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Address {
    text: String,
    /// Bytes of `text` before the `:` that starts the port.
    host_len: usize,
    port: u16,
}

/// Why a text is not an address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddressError {
    /// Longer than [`ADDRESS_BYTES_MAX`].
    #[error("{0:?} is longer than {ADDRESS_BYTES_MAX} bytes")]
    TooLong(String),
    /// No `:port` at the end.
    #[error("{0:?} has no port (write host:port)")]
    NoPort(String),
    /// The port is not a number from 1 to 65,535.
    #[error("{0:?}: the port must be a number from 1 to 65535")]
    Port(String),
    /// The host is empty, holds a space or a control character, or is a badly bracketed
    /// IPv6 address.
    #[error("{0:?}: the host must be a name, an IPv4 address or an IPv6 address in brackets")]
    Host(String),
}

/// Why an address gave nothing to connect to.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// The name did not resolve.
    #[error("{address}: the name does not resolve: {source}")]
    Lookup {
        /// The address.
        address: Address,
        /// Why.
        source: std::io::Error,
    },
    /// The name resolved to no address.
    #[error("{0}: the name resolves to no address")]
    Empty(Address),
}

impl Address {
    /// The text as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The host as written (an IPv6 address with its brackets).
    pub fn host(&self) -> &str {
        &self.text[..self.host_len]
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The socket address itself, when the host is a numeric address (no lookup needed).
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        let host = self.host();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let ip: IpAddr = host.parse().ok()?;
        Some(SocketAddr::new(ip, self.port))
    }

    /// True when the host is this machine for certain: a loopback address or `localhost`.
    pub fn is_loopback(&self) -> bool {
        match self.socket_addr() {
            Some(address) => address.ip().is_loopback(),
            None => self.host().eq_ignore_ascii_case("localhost"),
        }
    }

    /// The socket addresses the name stands for now (a numeric address without a lookup).
    pub async fn resolve(&self) -> Result<Vec<SocketAddr>, ResolveError> {
        if let Some(address) = self.socket_addr() {
            return Ok(vec![address]);
        }
        let found = tokio::net::lookup_host(self.text.as_str()).await;
        self.found(found.map(Iterator::collect))
    }

    /// [`Address::resolve`] for threads outside tokio (it blocks while the name is looked up).
    pub fn resolve_blocking(&self) -> Result<Vec<SocketAddr>, ResolveError> {
        if let Some(address) = self.socket_addr() {
            return Ok(vec![address]);
        }
        let found = std::net::ToSocketAddrs::to_socket_addrs(self.text.as_str());
        self.found(found.map(Iterator::collect))
    }

    fn found(
        &self,
        found: std::io::Result<Vec<SocketAddr>>,
    ) -> Result<Vec<SocketAddr>, ResolveError> {
        let addresses = found.map_err(|source| ResolveError::Lookup {
            address: self.clone(),
            source,
        })?;
        if addresses.is_empty() {
            return Err(ResolveError::Empty(self.clone()));
        }
        Ok(addresses)
    }
}

/// Connects to the first of `address`'s socket addresses that answers, resolving the name
/// now (so that a reconnect finds a machine that moved).
pub async fn connect(address: &Address) -> std::io::Result<tokio::net::TcpStream> {
    let resolved = address
        .resolve()
        .await
        .map_err(|error| std::io::Error::new(std::io::ErrorKind::NotFound, error.to_string()))?;
    let mut last = None;
    for socket in resolved {
        match tokio::net::TcpStream::connect(socket).await {
            Ok(stream) => return Ok(stream),
            Err(error) => last = Some(error),
        }
    }
    Err(last.expect("resolve gives at least one address"))
}

impl FromStr for Address {
    type Err = AddressError;

    fn from_str(text: &str) -> Result<Self, AddressError> {
        let owned = || text.to_string();
        if text.len() > ADDRESS_BYTES_MAX {
            return Err(AddressError::TooLong(owned()));
        }
        let (host, port) = text
            .rsplit_once(':')
            .ok_or_else(|| AddressError::NoPort(owned()))?;
        let port: u16 = port.parse().map_err(|_| AddressError::Port(owned()))?;
        if port == 0 {
            return Err(AddressError::Port(owned()));
        }
        if !host_is_valid(host) {
            return Err(AddressError::Host(owned()));
        }
        Ok(Address {
            text: owned(),
            host_len: host.len(),
            port,
        })
    }
}

/// A name (no spaces, controls, brackets or colons), an IPv4 address, or an IPv6 address in
/// brackets.
fn host_is_valid(host: &str) -> bool {
    if let Some(inner) = host.strip_prefix('[') {
        return inner
            .strip_suffix(']')
            .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok());
    }
    let bad = |c: char| c.is_whitespace() || c.is_control() || "[]:/@".contains(c);
    !host.is_empty() && !host.contains(bad)
}

impl TryFrom<&str> for Address {
    type Error = AddressError;

    fn try_from(text: &str) -> Result<Self, AddressError> {
        text.parse()
    }
}

impl From<SocketAddr> for Address {
    fn from(address: SocketAddr) -> Self {
        address
            .to_string()
            .parse()
            .expect("a socket address prints as host:port")
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for Address {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Address {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves names, IPv4 and bracketed IPv6 addresses parse, with host and port apart, and
    /// every malformed text is refused with its reason.
    #[test]
    fn parses_names_and_numbers() {
        let name: Address = "node1.example:7001".parse().unwrap();
        assert_eq!((name.host(), name.port()), ("node1.example", 7001));
        assert_eq!(name.socket_addr(), None);
        assert!(!name.is_loopback());
        let v4: Address = "10.0.0.2:8001".parse().unwrap();
        assert_eq!(v4.socket_addr(), Some("10.0.0.2:8001".parse().unwrap()));
        let v6: Address = "[::1]:9".parse().unwrap();
        assert_eq!(v6.socket_addr(), Some("[::1]:9".parse().unwrap()));
        assert!(v6.is_loopback());
        assert!(Address::try_from("LocalHost:1").unwrap().is_loopback());
        let socket: SocketAddr = "[fe80::1]:80".parse().unwrap();
        assert_eq!(Address::from(socket).socket_addr(), Some(socket));
        let refused = |text: &str| text.parse::<Address>().unwrap_err();
        assert!(matches!(refused("node1"), AddressError::NoPort(_)));
        assert!(matches!(refused("node1:0"), AddressError::Port(_)));
        assert!(matches!(refused("node1:65536"), AddressError::Port(_)));
        assert!(matches!(refused("node1:x"), AddressError::Port(_)));
        assert!(matches!(refused(":80"), AddressError::Host(_)));
        assert!(matches!(refused("a b:80"), AddressError::Host(_)));
        assert!(matches!(refused("::1:80"), AddressError::Host(_)));
        assert!(matches!(refused("[::g]:80"), AddressError::Host(_)));
        let long = format!("{}:80", "a".repeat(ADDRESS_BYTES_MAX));
        assert!(matches!(refused(&long), AddressError::TooLong(_)));
    }

    /// Proves serde reads and writes the text as written, and refuses a bad one.
    #[test]
    fn serde_keeps_the_text() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct Row {
            address: Address,
        }
        let row: Row = toml::from_str("address = \"localhost:7001\"").unwrap();
        assert_eq!(row.address.as_str(), "localhost:7001");
        assert_eq!(
            toml::to_string(&row).unwrap().trim(),
            "address = \"localhost:7001\""
        );
        let error = toml::from_str::<Row>("address = \"localhost\"").unwrap_err();
        assert!(error.to_string().contains("has no port"), "{error}");
    }

    /// Proves `localhost` resolves to a loopback address, both ways, and a name under the
    /// reserved `.invalid` domain (RFC 6761) is an error that names it, not a panic.
    #[tokio::test]
    async fn resolves_at_connect_time() {
        let local: Address = "localhost:7001".parse().unwrap();
        let found = local.resolve().await.unwrap();
        assert!(
            found
                .iter()
                .all(|a| a.ip().is_loopback() && a.port() == 7001)
        );
        assert_eq!(local.resolve_blocking().unwrap().len(), found.len());
        let missing: Address = "no-such-node.invalid:7001".parse().unwrap();
        let error = missing.resolve().await.unwrap_err();
        assert!(
            error.to_string().contains("no-such-node.invalid"),
            "{error}"
        );
        assert!(missing.resolve_blocking().is_err());
    }
}
