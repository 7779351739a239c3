//! Who may connect: every connection opens with a handshake in which the caller proves it
//! holds the cluster's key, without sending it, by a blake3 keyed MAC over a fresh challenge.
//!
//! The exchange, one frame each: the caller sends [`Hello`]; the listener answers with a
//! [`Challenge`] (a fresh random nonce), or with an [`Admission::Refused`] if the hello is
//! refused; the caller sends a [`Proof`] (the MAC of the cluster id, its own identity, the
//! identity of the node it means to reach and the nonce); the listener answers with an
//! [`Admission`]. A recorded handshake is worthless on another connection, since its nonce
//! differs, and a proof meant for one node does not open another (a relay of one node's
//! challenge to a caller that dialed a different node fails).
//!
//! Peers always prove a key derived from the cluster's secret. Clients prove one derived from
//! the client secret when the cluster sets one, and send an empty proof otherwise.

use crate::ids::NodeId;
use crate::message::{
    Admission, Challenge, Hello, PROTOCOL_VERSION, PROTOCOL_VERSION_OLDEST, Proof, Refusal,
};

/// Fewest bytes a secret may have.
pub const SECRET_BYTES_MIN: usize = 16;
/// Bytes of a challenge's nonce.
pub const NONCE_BYTES: usize = 32;
/// Bytes of a proof's MAC.
pub const MAC_BYTES: usize = 32;

/// The blake3 key-derivation contexts: a peer key and a client key made from one secret
/// differ, so that a client secret never lets a process pose as a node.
const PEER_KEY_CONTEXT: &str = "replicated-bank 2026-11-30 peer handshake";
const CLIENT_KEY_CONTEXT: &str = "replicated-bank 2026-11-30 client handshake";

/// A secret that is too short to be one.
#[derive(Debug, thiserror::Error)]
#[error("a secret needs at least {SECRET_BYTES_MIN} bytes, this one has {bytes}")]
pub struct ShortSecret {
    /// Bytes the secret has.
    pub bytes: usize,
}

/// A key derived from a secret; it never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct Key([u8; 32]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    /// The key peers prove, from the cluster's secret.
    pub fn peer(secret: &[u8]) -> Result<Key, ShortSecret> {
        Key::derive(PEER_KEY_CONTEXT, secret)
    }

    /// The key clients prove, from the cluster's client secret.
    pub fn client(secret: &[u8]) -> Result<Key, ShortSecret> {
        Key::derive(CLIENT_KEY_CONTEXT, secret)
    }

    /// A key from the operating system's random source (for a cluster whose nodes share one
    /// process and need no configured secret).
    pub fn random() -> std::io::Result<Key> {
        Ok(Key(fresh_nonce()?))
    }

    fn derive(context: &str, secret: &[u8]) -> Result<Key, ShortSecret> {
        if secret.len() < SECRET_BYTES_MIN {
            return Err(ShortSecret {
                bytes: secret.len(),
            });
        }
        Ok(Key(blake3::derive_key(context, secret)))
    }

    /// The MAC a caller `caller` (a node, or `None` for a client) of cluster `cluster` sends
    /// to `listener` (the node it dialed; `None` for a client, which dials addresses) for
    /// `nonce`, on a connection of protocol `version` (the one its hello offered).
    pub fn prove(
        &self,
        (cluster, version): (u64, u16),
        caller: Option<NodeId>,
        listener: Option<NodeId>,
        nonce: &[u8; NONCE_BYTES],
    ) -> Proof {
        let identity = |node: Option<NodeId>| [node.map_or(0, |n| n.0), u8::from(node.is_some())];
        let mut mac = blake3::Hasher::new_keyed(&self.0);
        mac.update(&cluster.to_le_bytes());
        mac.update(&identity(caller));
        mac.update(&identity(listener));
        mac.update(&version.to_le_bytes());
        mac.update(nonce);
        Proof {
            mac: *mac.finalize().as_bytes(),
        }
    }

    /// True when `proof` is this key's MAC for the caller and nonce (compared in constant
    /// time).
    pub fn verify(
        &self,
        (cluster, version): (u64, u16),
        caller: Option<NodeId>,
        listener: Option<NodeId>,
        nonce: &[u8; NONCE_BYTES],
        proof: &Proof,
    ) -> bool {
        let expected = self.prove((cluster, version), caller, listener, nonce);
        let expected = blake3::Hash::from(expected.mac);
        expected == blake3::Hash::from(proof.mac)
    }
}

/// A nonce from the operating system's random source.
pub fn fresh_nonce() -> std::io::Result<[u8; NONCE_BYTES]> {
    let mut nonce = [0u8; NONCE_BYTES];
    getrandom::fill(&mut nonce).map_err(std::io::Error::other)?;
    Ok(nonce)
}

/// Which port a connection came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Port {
    /// The peer port: only the cluster's nodes, always with the peer key.
    Peer,
    /// The client port: clients (never nodes), with the client key when the cluster has one.
    Client,
}

/// The listener's side of a handshake, without IO.
#[derive(Debug)]
pub struct Gate<'a> {
    /// This cluster.
    pub cluster: u64,
    /// The port.
    pub port: Port,
    /// The key callers must prove (`None`: any proof passes).
    pub key: Option<&'a Key>,
    /// The nodes that may call the peer port.
    pub nodes: &'a [NodeId],
    /// This node, as peers name it in their proofs (clients name no node).
    pub me: NodeId,
}

impl Gate<'_> {
    /// Checks a caller's hello: the protocol version (one this build speaks) and the kind of
    /// caller for this port.
    pub fn hello(&self, hello: &Hello) -> Result<(), Refusal> {
        if !(PROTOCOL_VERSION_OLDEST..=PROTOCOL_VERSION).contains(&hello.version) {
            return Err(Refusal::Version {
                theirs: hello.version,
                ours: PROTOCOL_VERSION,
            });
        }
        if hello.cluster != self.cluster {
            return Err(Refusal::WrongCluster {
                theirs: hello.cluster,
                ours: self.cluster,
            });
        }
        match (self.port, hello.node) {
            (Port::Peer, Some(node)) if self.nodes.contains(&node) => Ok(()),
            (Port::Peer, caller) => Err(Refusal::NotAPeer { caller }),
            (Port::Client, None) => Ok(()),
            (Port::Client, Some(_)) => Err(Refusal::NodeOnClientPort),
        }
    }

    /// Who callers of this port name as the node they reach: peers this node, clients none.
    fn listener(&self) -> Option<NodeId> {
        match self.port {
            Port::Peer => Some(self.me),
            Port::Client => None,
        }
    }

    /// Checks a caller's proof against the challenge it was given.
    pub fn proof(&self, hello: &Hello, challenge: &Challenge, proof: &Proof) -> Admission {
        match self.key {
            Some(key)
                if !key.verify(
                    (self.cluster, hello.version),
                    hello.node,
                    self.listener(),
                    &challenge.nonce,
                    proof,
                ) =>
            {
                Admission::Refused(Refusal::Unauthenticated)
            }
            Some(_) | None => Admission::Accepted,
        }
    }
}

/// The caller's answer to a challenge from `listener` (the node it dialed; `None` for a
/// client): the MAC with its key, or an empty proof without one.
pub fn answer(
    key: Option<&Key>,
    hello: &Hello,
    listener: Option<NodeId>,
    challenge: &Challenge,
) -> Proof {
    key.map_or(
        Proof {
            mac: [0; MAC_BYTES],
        },
        |key| {
            let connection = (hello.cluster, hello.version);
            key.prove(connection, hello.node, listener, &challenge.nonce)
        },
    )
}

/// The version to call again with after `refusal`: the listener's, when it refused this
/// caller's version for an older one this build speaks too (a node not upgraded yet).
/// `None` for any other refusal, or a listener whose version this build does not speak.
pub fn version_to_retry(offered: u16, refusal: &Refusal) -> Option<u16> {
    let Refusal::Version { ours, .. } = refusal else {
        return None;
    };
    (*ours < offered && (PROTOCOL_VERSION_OLDEST..=PROTOCOL_VERSION).contains(ours))
        .then_some(*ours)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(node: Option<u8>) -> Hello {
        Hello {
            version: PROTOCOL_VERSION,
            cluster: 9,
            node: node.map(NodeId),
        }
    }

    /// Node 1's peer port in cluster 9, for `nodes`, with `key`.
    fn peer_gate<'a>(key: &'a Key, nodes: &'a [NodeId]) -> Gate<'a> {
        Gate {
            cluster: 9,
            port: Port::Peer,
            key: Some(key),
            nodes,
            me: NodeId(1),
        }
    }

    /// Proves the right key passes, and a wrong key, another caller, another cluster or
    /// another nonce (a replayed proof) is refused.
    #[test]
    fn only_the_right_key_for_this_nonce_passes() {
        let key = Key::peer(b"correct horse battery staple").unwrap();
        let wrong = Key::peer(b"correct horse battery stapler").unwrap();
        let nodes = [NodeId(1), NodeId(2), NodeId(3)];
        let gate = peer_gate(&key, &nodes);
        let caller = hello(Some(2));
        let challenge = Challenge {
            nonce: fresh_nonce().unwrap(),
        };
        assert_eq!(gate.hello(&caller), Ok(()));
        let good = answer(Some(&key), &caller, Some(NodeId(1)), &challenge);
        assert_eq!(gate.proof(&caller, &challenge, &good), Admission::Accepted);
        let refused = Admission::Refused(Refusal::Unauthenticated);
        let bad = answer(Some(&wrong), &caller, Some(NodeId(1)), &challenge);
        assert_eq!(gate.proof(&caller, &challenge, &bad), refused);
        assert_eq!(
            gate.proof(
                &caller,
                &challenge,
                &answer(None, &caller, Some(NodeId(1)), &challenge)
            ),
            refused
        );
        // The same proof claimed by another node, or replayed against a fresh challenge.
        assert_eq!(gate.proof(&hello(Some(3)), &challenge, &good), refused);
        let fresh = Challenge {
            nonce: fresh_nonce().unwrap(),
        };
        assert_ne!(fresh.nonce, challenge.nonce);
        assert_eq!(gate.proof(&caller, &fresh, &good), refused);
        // A proof meant for node 3, relayed to node 1 with node 1's challenge.
        let for_three = answer(Some(&key), &caller, Some(NodeId(3)), &challenge);
        assert_eq!(gate.proof(&caller, &challenge, &for_three), refused);
        // A client key is not a peer key, even from the same secret.
        let client = Key::client(b"correct horse battery staple").unwrap();
        assert_eq!(
            gate.proof(
                &caller,
                &challenge,
                &answer(Some(&client), &caller, Some(NodeId(1)), &challenge)
            ),
            refused
        );
    }

    /// Proves a proof binds the version its hello offered (a caller cannot be admitted under
    /// another than it proved), and that a caller retries only a version this build speaks,
    /// older than the one refused.
    #[test]
    fn a_proof_binds_its_version_and_a_refusal_names_the_retry() {
        let key = Key::peer(b"correct horse battery staple").unwrap();
        let nodes = [NodeId(1), NodeId(2)];
        let gate = peer_gate(&key, &nodes);
        let challenge = Challenge {
            nonce: fresh_nonce().unwrap(),
        };
        let mut older = hello(Some(2));
        older.version = PROTOCOL_VERSION_OLDEST;
        let proof = answer(Some(&key), &older, Some(NodeId(1)), &challenge);
        assert_eq!(gate.proof(&older, &challenge, &proof), Admission::Accepted);
        let newest = hello(Some(2));
        assert_eq!(
            gate.proof(&newest, &challenge, &proof),
            Admission::Refused(Refusal::Unauthenticated)
        );
        let refused_for = |ours| Refusal::Version {
            theirs: PROTOCOL_VERSION,
            ours,
        };
        let retry = |ours| version_to_retry(PROTOCOL_VERSION, &refused_for(ours));
        assert_eq!(
            retry(PROTOCOL_VERSION_OLDEST),
            Some(PROTOCOL_VERSION_OLDEST)
        );
        assert_eq!(retry(PROTOCOL_VERSION_OLDEST - 1), None);
        assert_eq!(retry(PROTOCOL_VERSION), None);
        assert_eq!(retry(PROTOCOL_VERSION + 1), None);
        assert_eq!(
            version_to_retry(PROTOCOL_VERSION, &Refusal::Unauthenticated),
            None
        );
    }

    /// Proves the hello check refuses another version, another cluster, a stranger on the
    /// peer port and a node on the client port, and that short secrets are refused.
    #[test]
    fn hello_and_secret_checks() {
        let nodes = [NodeId(1), NodeId(2)];
        let peers = Gate {
            cluster: 9,
            port: Port::Peer,
            key: None,
            nodes: &nodes,
            me: NodeId(1),
        };
        let clients = Gate {
            port: Port::Client,
            ..peers
        };
        let mut newer = hello(Some(1));
        newer.version += 1;
        assert!(matches!(peers.hello(&newer), Err(Refusal::Version { .. })));
        let mut oldest = hello(Some(1));
        oldest.version = PROTOCOL_VERSION_OLDEST;
        assert_eq!(peers.hello(&oldest), Ok(()));
        oldest.version -= 1;
        assert!(matches!(peers.hello(&oldest), Err(Refusal::Version { .. })));
        let mut other = hello(None);
        other.cluster = 10;
        assert!(matches!(
            clients.hello(&other),
            Err(Refusal::WrongCluster {
                theirs: 10,
                ours: 9
            })
        ));
        assert!(matches!(
            peers.hello(&hello(Some(5))),
            Err(Refusal::NotAPeer { .. })
        ));
        assert!(matches!(
            peers.hello(&hello(None)),
            Err(Refusal::NotAPeer { .. })
        ));
        assert_eq!(
            clients.hello(&hello(Some(1))),
            Err(Refusal::NodeOnClientPort)
        );
        assert_eq!(clients.hello(&hello(None)), Ok(()));
        assert!(Key::peer(b"short").is_err());
        assert_eq!(format!("{:?}", Key::peer(&[7; 16]).unwrap()), "Key(..)");
    }
}
