//! Who may connect: every connection opens with a handshake in which the caller proves it
//! holds one of the cluster's keys, without sending it, by a blake3 keyed MAC over a fresh
//! challenge.
//!
//! The exchange, one frame each: the caller sends [`Hello`]; the listener answers with a
//! [`Challenge`] (a fresh random nonce), or with an
//! [`Admission::Refused`](crate::message::Admission::Refused) if the hello is refused; the
//! caller sends a [`Proof`] (the MAC of the cluster id, its own identity, the identity of the
//! node it means to reach and the nonce); the listener answers with an
//! [`Admission`](crate::message::Admission). A recorded handshake is worthless on another
//! connection, since its nonce differs, and a proof meant for one node does not open another
//! (a relay of one node's challenge to a caller that dialed a different node fails).
//!
//! Three credentials, three roles. Peers always prove a key derived from the cluster's secret.
//! On the client port, a proof made with the operator key admits an operator connection
//! ([`ClientRole::Operator`]); any other is an application connection
//! ([`ClientRole::Application`]), which must prove the client key when the cluster sets one
//! and sends an empty proof otherwise. The role decides which requests the connection may
//! make ([`ClientRole::permits`]). During a rotation a listener accepts a credential's
//! previous key beside its current one ([`KeyRing`]).

use crate::ids::NodeId;
use crate::message::{
    Challenge, ClientRole, Hello, PROTOCOL_VERSION, PROTOCOL_VERSION_OLDEST, Proof, Refusal,
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
const OPERATOR_KEY_CONTEXT: &str = "replicated-bank 2026-12-04 operator handshake";
/// The operator key of a cluster that names no operator secret comes from its peer key: whoever
/// holds the peer secret can already pose as a node, so it grants nothing more.
const OPERATOR_OF_PEER_CONTEXT: &str = "replicated-bank 2026-12-04 operator key of the peer key";

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

    /// The key operators prove, from the cluster's operator secret.
    pub fn operator(secret: &[u8]) -> Result<OperatorKey, ShortSecret> {
        Key::derive(OPERATOR_KEY_CONTEXT, secret).map(OperatorKey)
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

/// The key that makes a client connection an operator's. Made only from the operator secret
/// ([`Key::operator`]) or the peer key ([`OperatorKey::of_peer_key`]), never from the client
/// secret: an application's configuration cannot hold one by accident.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorKey(Key);

impl OperatorKey {
    /// The operator key of a cluster that names no operator secret: derived from its peer key.
    pub fn of_peer_key(peer: &Key) -> OperatorKey {
        OperatorKey(Key(blake3::derive_key(OPERATOR_OF_PEER_CONTEXT, &peer.0)))
    }

    /// The key the operator proves.
    pub fn key(&self) -> &Key {
        &self.0
    }
}

/// The keys a listener accepts for one credential: the current one, which callers prove,
/// and during a rotation the previous one, which callers not yet given the new one still
/// prove.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRing {
    /// The key callers prove.
    pub current: Key,
    /// The key the credential had before a rotation, accepted until it ends.
    pub previous: Option<Key>,
}

impl KeyRing {
    /// One key, no rotation under way.
    pub fn new(current: Key) -> KeyRing {
        KeyRing {
            current,
            previous: None,
        }
    }

    /// The keys a caller holding this ring tries, in order: the current, then the previous
    /// (for a listener not told of the rotation yet).
    pub fn to_prove(&self) -> impl Iterator<Item = &Key> {
        std::iter::once(&self.current).chain(self.previous.as_ref())
    }

    /// True when `proof` is the MAC of either key (each compared in constant time).
    fn verifies(
        &self,
        connection: (u64, u16),
        (caller, listener): (Option<NodeId>, Option<NodeId>),
        nonce: &[u8; NONCE_BYTES],
        proof: &Proof,
    ) -> bool {
        self.to_prove()
            .any(|key| key.verify(connection, caller, listener, nonce, proof))
    }
}

/// Every key a node accepts, one ring per credential.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    /// What nodes prove to each other.
    pub peer: KeyRing,
    /// What applications prove, or `None` when they need not authenticate.
    pub client: Option<KeyRing>,
    /// What operators prove.
    pub operator: KeyRing,
}

impl Credentials {
    /// A cluster whose nodes share `peer`, with no client key and the operator key of
    /// [`OperatorKey::of_peer_key`].
    pub fn of_peer_key(peer: Key) -> Credentials {
        let operator = OperatorKey::of_peer_key(&peer).0;
        Credentials {
            peer: KeyRing::new(peer),
            client: None,
            operator: KeyRing::new(operator),
        }
    }
}

/// Who a handshake admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// A node of the cluster, on the peer port.
    Peer(NodeId),
    /// A client, on the client port, in this role.
    Client(ClientRole),
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
    /// The keys this node accepts.
    pub keys: &'a Credentials,
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

    /// Checks a caller's proof against the challenge it was given (after [`Gate::hello`]
    /// passed): who the caller is, or why it is refused. On the client port the operator
    /// key is tried first; a proof that fails it is an application's.
    pub fn proof(
        &self,
        hello: &Hello,
        challenge: &Challenge,
        proof: &Proof,
    ) -> Result<Caller, Refusal> {
        let connection = (self.cluster, hello.version);
        let nonce = &challenge.nonce;
        match (self.port, hello.node) {
            (Port::Peer, Some(node)) => {
                let who = (Some(node), Some(self.me));
                match self.keys.peer.verifies(connection, who, nonce, proof) {
                    true => Ok(Caller::Peer(node)),
                    false => Err(Refusal::Unauthenticated),
                }
            }
            (Port::Peer, None) => Err(Refusal::NotAPeer { caller: None }),
            (Port::Client, Some(_)) => Err(Refusal::NodeOnClientPort),
            (Port::Client, None) => {
                let who = (None, None);
                if self.keys.operator.verifies(connection, who, nonce, proof) {
                    return Ok(Caller::Client(ClientRole::Operator));
                }
                match &self.keys.client {
                    Some(ring) if !ring.verifies(connection, who, nonce, proof) => {
                        Err(Refusal::Unauthenticated)
                    }
                    Some(_) | None => Ok(Caller::Client(ClientRole::Application)),
                }
            }
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
    use crate::message::ClientRequest;

    fn hello(node: Option<u8>) -> Hello {
        Hello {
            version: PROTOCOL_VERSION,
            cluster: 9,
            node: node.map(NodeId),
        }
    }

    fn challenge() -> Challenge {
        Challenge {
            nonce: fresh_nonce().unwrap(),
        }
    }

    /// Node 1's port in cluster 9, for `nodes`, with `keys`.
    fn gate<'a>(port: Port, keys: &'a Credentials, nodes: &'a [NodeId]) -> Gate<'a> {
        Gate {
            cluster: 9,
            port,
            keys,
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
        let keys = Credentials::of_peer_key(key.clone());
        let gate = gate(Port::Peer, &keys, &nodes);
        let caller = hello(Some(2));
        let challenge = challenge();
        assert_eq!(gate.hello(&caller), Ok(()));
        let good = answer(Some(&key), &caller, Some(NodeId(1)), &challenge);
        let admitted = Ok(Caller::Peer(NodeId(2)));
        assert_eq!(gate.proof(&caller, &challenge, &good), admitted);
        let refused = Err(Refusal::Unauthenticated);
        let bad = answer(Some(&wrong), &caller, Some(NodeId(1)), &challenge);
        assert_eq!(gate.proof(&caller, &challenge, &bad), refused);
        let empty = answer(None, &caller, Some(NodeId(1)), &challenge);
        assert_eq!(gate.proof(&caller, &challenge, &empty), refused);
        // The same proof claimed by another node, or replayed against a fresh challenge.
        assert_eq!(gate.proof(&hello(Some(3)), &challenge, &good), refused);
        let fresh = super::tests::challenge();
        assert_ne!(fresh.nonce, challenge.nonce);
        assert_eq!(gate.proof(&caller, &fresh, &good), refused);
        // A proof meant for node 3, relayed to node 1 with node 1's challenge.
        let for_three = answer(Some(&key), &caller, Some(NodeId(3)), &challenge);
        assert_eq!(gate.proof(&caller, &challenge, &for_three), refused);
        // Neither a client key nor an operator key is a peer key, even from the same secret.
        let secret = b"correct horse battery staple";
        let client = Key::client(secret).unwrap();
        let operator = Key::operator(secret).unwrap();
        for other in [
            &client,
            operator.key(),
            OperatorKey::of_peer_key(&key).key(),
        ] {
            let proof = answer(Some(other), &caller, Some(NodeId(1)), &challenge);
            assert_eq!(gate.proof(&caller, &challenge, &proof), refused);
        }
    }

    /// Proves the client port's roles: the operator key makes an operator connection, the
    /// client key (or any proof, where the cluster sets no client key) an application one,
    /// and a peer key or a client key proves no operator; each role may make only its own
    /// requests.
    #[test]
    fn the_proof_decides_the_role_and_the_role_the_requests() {
        let peer = Key::peer(b"the nodes share this secret").unwrap();
        let client = Key::client(b"the applications hold this one").unwrap();
        let operator = Key::operator(b"only the operators hold this one").unwrap();
        let mut keys = Credentials::of_peer_key(peer.clone());
        keys.operator = KeyRing::new(operator.key().clone());
        let nodes = [NodeId(2)];
        let caller = hello(None);
        let challenge = challenge();
        let role = |keys: &Credentials, key: Option<&Key>| {
            let proof = answer(key, &caller, None, &challenge);
            gate(Port::Client, keys, &nodes).proof(&caller, &challenge, &proof)
        };
        let application = Ok(Caller::Client(ClientRole::Application));
        let as_operator = Ok(Caller::Client(ClientRole::Operator));
        // No client key set: anyone is an application, only the operator key an operator.
        assert_eq!(role(&keys, None), application);
        assert_eq!(role(&keys, Some(&client)), application);
        assert_eq!(role(&keys, Some(&peer)), application);
        assert_eq!(role(&keys, Some(operator.key())), as_operator);
        let derived = OperatorKey::of_peer_key(&peer);
        assert_eq!(role(&keys, Some(derived.key())), application);
        keys.client = Some(KeyRing::new(client.clone()));
        assert_eq!(role(&keys, None), Err(Refusal::Unauthenticated));
        assert_eq!(role(&keys, Some(&peer)), Err(Refusal::Unauthenticated));
        assert_eq!(role(&keys, Some(&client)), application);
        assert_eq!(role(&keys, Some(operator.key())), as_operator);
        // Without an operator secret, the operator key is the peer key's.
        let derived_keys = Credentials::of_peer_key(peer.clone());
        assert_eq!(role(&derived_keys, Some(derived.key())), as_operator);
        use ClientRequest as R;
        let operator_only = [
            R::SetMode(crate::message::Mode::Performance),
            R::Upgrade(2),
            R::Backup(crate::message::BackupRequest {
                index: None,
                offset: 0,
            }),
            R::ChangeMembers(crate::message::MemberChange::Remove(NodeId(3))),
        ];
        let application_only = [R::Resume(crate::ids::ClientId(7))];
        for request in &operator_only {
            assert!(ClientRole::Operator.permits(request), "{request:?}");
            assert!(!ClientRole::Application.permits(request), "{request:?}");
        }
        for request in &application_only {
            assert!(ClientRole::Application.permits(request), "{request:?}");
            assert!(!ClientRole::Operator.permits(request), "{request:?}");
        }
        for request in [R::Status, R::Versions] {
            assert!(ClientRole::Application.permits(&request));
            assert!(ClientRole::Operator.permits(&request));
        }
    }

    /// Proves a ring in rotation accepts the previous key beside the current one, and a
    /// caller holding it tries the current key first.
    #[test]
    fn a_rotation_accepts_both_keys() {
        let old = Key::peer(b"the secret of last year, 16+").unwrap();
        let new = Key::peer(b"the secret of this year, 16+").unwrap();
        let mut keys = Credentials::of_peer_key(new.clone());
        keys.peer.previous = Some(old.clone());
        let nodes = [NodeId(2)];
        let gate = gate(Port::Peer, &keys, &nodes);
        let caller = hello(Some(2));
        let challenge = challenge();
        for key in [&old, &new] {
            let proof = answer(Some(key), &caller, Some(NodeId(1)), &challenge);
            assert_eq!(
                gate.proof(&caller, &challenge, &proof),
                Ok(Caller::Peer(NodeId(2)))
            );
        }
        let order: Vec<&Key> = keys.peer.to_prove().collect();
        assert_eq!(order, vec![&new, &old]);
        keys.peer.previous = None;
        let gate = super::tests::gate(Port::Peer, &keys, &nodes);
        let proof = answer(Some(&old), &caller, Some(NodeId(1)), &challenge);
        assert_eq!(
            gate.proof(&caller, &challenge, &proof),
            Err(Refusal::Unauthenticated)
        );
    }

    /// Proves a proof binds the version its hello offered (a caller cannot be admitted under
    /// another than it proved), and that a caller retries only a version this build speaks,
    /// older than the one refused.
    #[test]
    fn a_proof_binds_its_version_and_a_refusal_names_the_retry() {
        let key = Key::peer(b"correct horse battery staple").unwrap();
        let nodes = [NodeId(1), NodeId(2)];
        let keys = Credentials::of_peer_key(key.clone());
        let gate = gate(Port::Peer, &keys, &nodes);
        let challenge = challenge();
        let mut older = hello(Some(2));
        older.version = PROTOCOL_VERSION_OLDEST;
        let proof = answer(Some(&key), &older, Some(NodeId(1)), &challenge);
        assert_eq!(
            gate.proof(&older, &challenge, &proof),
            Ok(Caller::Peer(NodeId(2)))
        );
        let newest = hello(Some(2));
        assert_eq!(
            gate.proof(&newest, &challenge, &proof),
            Err(Refusal::Unauthenticated)
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
        let keys = Credentials::of_peer_key(Key::peer(&[7; 16]).unwrap());
        let peers = gate(Port::Peer, &keys, &nodes);
        let clients = gate(Port::Client, &keys, &nodes);
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
        assert!(Key::operator(b"short").is_err());
        assert_eq!(format!("{:?}", Key::peer(&[7; 16]).unwrap()), "Key(..)");
    }
}
