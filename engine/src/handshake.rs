//! The handshake on every connection (see [`net::auth`]): the caller's side, async for node
//! connections and clients and blocking for the WAL thread's acknowledgements, and the
//! listener's side. Frames are held to [`HANDSHAKE_FRAME_BODY_BYTES_MAX`] until the
//! connection is admitted.

use crate::codec::{self, CodecError};
use crate::ids::NodeId;
use futures::{SinkExt, StreamExt};
use net::auth::{self, Caller, Gate, Key, Port};
use net::frame::{FrameCodec, FrameError, HANDSHAKE_FRAME_BODY_BYTES_MAX};
use net::message::{
    Admission, Challenge, ClientRole, Credential, Hello, PROTOCOL_VERSION, Proof, Refusal,
};

/// What a handshake runs over: a TCP stream, in clear or in TLS.
pub trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin {}

impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> Io for S {}
use tokio_util::codec::Framed;

/// Why a handshake did not admit the connection.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The socket or a frame failed.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// A frame did not decode as the message expected.
    #[error("decode: {0}")]
    Decode(#[from] CodecError),
    /// The other side refused.
    #[error("refused: {0}")]
    Refused(Refusal),
    /// The other side closed.
    #[error("closed during the handshake")]
    Closed,
}

impl HandshakeError {
    /// The refusal to tell the other side, if the connection can still hear one.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            HandshakeError::Frame(error) => Refusal::for_frame(error),
            HandshakeError::Decode(_) => Some(Refusal::Undecodable),
            HandshakeError::Refused(refusal) => Some(refusal.clone()),
            HandshakeError::Closed => None,
        }
    }

    /// The older protocol version to call again with, when the listener refused `offered`
    /// for one this build speaks too (a node of an earlier build).
    pub fn version_to_retry(&self, offered: u16) -> Option<u16> {
        match self {
            HandshakeError::Refused(refusal) => auth::version_to_retry(offered, refusal),
            HandshakeError::Frame(_) | HandshakeError::Decode(_) | HandshakeError::Closed => None,
        }
    }
}

/// What a caller offers in a handshake: a protocol version, and which of its keys (the
/// index in its ring's [`net::auth::KeyRing::to_prove`] order) it proves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Offer {
    /// The protocol version.
    pub(crate) version: u16,
    /// The key's place in the ring.
    pub(crate) key: usize,
}

impl Offer {
    /// The first offer: the newest version, the current key.
    pub(crate) const FIRST: Offer = Offer {
        version: PROTOCOL_VERSION,
        key: 0,
    };

    /// The offer to call again with at once after `error`, if any: the listener's version
    /// when it refused this one for an older one this build speaks too (a node of an earlier
    /// build), or the next of the caller's `keys` keys when the listener refused the proof
    /// (a node not yet given the key a rotation brought).
    pub(crate) fn after(self, error: &HandshakeError, keys: usize) -> Option<Offer> {
        if let Some(version) = error.version_to_retry(self.version) {
            return Some(Offer { version, ..self });
        }
        let unauthenticated = matches!(error, HandshakeError::Refused(Refusal::Unauthenticated));
        (unauthenticated && self.key + 1 < keys).then_some(Offer {
            key: self.key + 1,
            ..self
        })
    }
}

async fn next<T: codec::Decode<()>, S: Io>(
    frames: &mut Framed<S, FrameCodec>,
) -> Result<T, HandshakeError> {
    let frame = frames.next().await.ok_or(HandshakeError::Closed)??;
    Ok(codec::decode(&frame)?)
}

/// The listener's answer to a hello, as the caller reads it: a challenge, or the refusal a
/// listener sends in its place (a frame of the listener's cluster, when the caller's is
/// another, fails the caller's codec: that is a refusal too).
fn challenge_or_refusal(
    frame: Result<bytes::Bytes, FrameError>,
    ours: u64,
) -> Result<Challenge, HandshakeError> {
    let frame = match frame {
        Err(FrameError::WrongCluster { theirs, .. }) => {
            return Err(HandshakeError::Refused(Refusal::WrongCluster {
                theirs: ours,
                ours: theirs,
            }));
        }
        other => other?,
    };
    match codec::decode::<Challenge>(&frame) {
        Ok(challenge) => Ok(challenge),
        Err(error) => match codec::decode::<Admission>(&frame) {
            Ok(Admission::Refused(refusal)) => Err(HandshakeError::Refused(refusal)),
            Ok(Admission::Accepted) | Err(_) => Err(error.into()),
        },
    }
}

/// The caller's side: hello, answer the challenge of `listener` (the node dialed; `None`
/// for a client), wait for admission. The codec's limit is the handshake's meanwhile.
pub async fn introduce<S: Io>(
    frames: &mut Framed<S, FrameCodec>,
    hello: &Hello,
    listener: Option<NodeId>,
    key: Option<&Key>,
) -> Result<(), HandshakeError> {
    let limit = frames.codec().limit();
    frames.codec_mut().set_limit(HANDSHAKE_FRAME_BODY_BYTES_MAX);
    let outcome = async {
        frames.send(hello).await?;
        let first = frames.next().await.ok_or(HandshakeError::Closed)?;
        let challenge = challenge_or_refusal(first, hello.cluster)?;
        let proof = auth::answer(key, hello, listener, &challenge);
        frames.send(&proof).await?;
        match next(frames).await? {
            Admission::Accepted => Ok(()),
            Admission::Refused(refusal) => Err(HandshakeError::Refused(refusal)),
        }
    }
    .await;
    frames.codec_mut().set_limit(limit);
    outcome
}

/// The caller's side on a blocking socket (whose read timeout bounds each wait).
pub(crate) fn introduce_blocking<S: std::io::Read + std::io::Write>(
    stream: &mut S,
    mut codec: FrameCodec,
    hello: &Hello,
    listener: NodeId,
    key: &Key,
) -> Result<(), HandshakeError> {
    codec.set_limit(HANDSHAKE_FRAME_BODY_BYTES_MAX);
    let write =
        |stream: &mut S, frame: bytes::BytesMut| stream.write_all(&frame).map_err(FrameError::Io);
    write(stream, codec.frame(hello)?)?;
    let challenge = challenge_or_refusal(codec.read_frame(stream), hello.cluster)?;
    let proof = auth::answer(Some(key), hello, Some(listener), &challenge);
    write(stream, codec.frame(&proof)?)?;
    match codec::decode(&codec.read_frame(stream)?)? {
        Admission::Accepted => Ok(()),
        Admission::Refused(refusal) => Err(HandshakeError::Refused(refusal)),
    }
}

/// Keys a listener recognizes on its client port and never admits: another role's secret made
/// into the operator's key (the client secret or the peer secret, where the cluster sets an
/// operator secret of its own), each with whose secret it is. A proof with one is refused
/// naming that role ([`Refusal::WrongCredential`]).
pub type MisusedKeys = Vec<(Key, Credential)>;

/// Who `proof` shows the caller is, or why it is refused: the gate's answer, except that on
/// the client port a proof the gate matched with no key (refused as unauthenticated, or taken
/// for an application's where the cluster sets no client key) that is one of `misused` is
/// refused naming whose secret it is. It never admits more than the gate does.
fn verdict(
    gate: &Gate<'_>,
    misused: &[(Key, Credential)],
    (hello, challenge, proof): (&Hello, &Challenge, &Proof),
) -> Result<Caller, Refusal> {
    let caller = gate.proof(hello, challenge, proof);
    let matched_none = match &caller {
        Err(Refusal::Unauthenticated) => true,
        Ok(Caller::Client(ClientRole::Application)) => gate.keys.client.is_none(),
        Ok(_) | Err(_) => false,
    };
    if gate.port != Port::Client || !matched_none {
        return caller;
    }
    let connection = (gate.cluster, hello.version);
    let nonce = &challenge.nonce;
    let recognized = misused
        .iter()
        .find(|(key, _)| key.verify(connection, None, None, nonce, proof));
    match recognized {
        Some(&(_, proved)) => Err(Refusal::WrongCredential {
            proved,
            needs: ClientRole::Operator,
        }),
        None => caller,
    }
}

/// The listener's side: read the hello, challenge it, check the proof (against the gate's
/// keys, then on the client port against `misused`). Returns the caller's hello and who the
/// proof shows it is once the proof holds, without admitting it yet ([`welcome`] does, or the
/// caller sends a refusal of its own, a limit say). A refusal here is sent before the error
/// returns (best effort: the caller bounds the time). The codec's limit is the handshake's
/// meanwhile.
pub(crate) async fn admit<S: Io>(
    frames: &mut Framed<S, FrameCodec>,
    gate: &Gate<'_>,
    misused: &[(Key, Credential)],
) -> Result<(Hello, Caller), HandshakeError> {
    let limit = frames.codec().limit();
    frames.codec_mut().set_limit(HANDSHAKE_FRAME_BODY_BYTES_MAX);
    let outcome = async {
        let hello: Hello = next(frames).await?;
        gate.hello(&hello).map_err(HandshakeError::Refused)?;
        let challenge = Challenge {
            nonce: auth::fresh_nonce().map_err(FrameError::Io)?,
        };
        frames.send(&challenge).await?;
        let proof: Proof = next(frames).await?;
        let caller = verdict(gate, misused, (&hello, &challenge, &proof))
            .map_err(HandshakeError::Refused)?;
        Ok::<_, HandshakeError>((hello, caller))
    }
    .await;
    if let Err(error) = &outcome
        && let Some(refusal) = error.refusal()
    {
        let _ = frames.send(&Admission::Refused(refusal)).await;
    }
    frames.codec_mut().set_limit(limit);
    outcome
}

/// Admits a connection whose caller [`admit`] accepted.
pub(crate) async fn welcome<S: Io>(
    frames: &mut Framed<S, FrameCodec>,
) -> Result<(), HandshakeError> {
    Ok(frames.send(&Admission::Accepted).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::NodeId;
    use net::auth::{Credentials, KeyRing, OperatorKey};

    const PEER: &[u8] = b"the nodes of this cluster share this";
    const CLIENT: &[u8] = b"the applications of this cluster hold this";
    const OPERATOR: &[u8] = b"only the operators of this cluster hold this";

    /// A node's keys with an operator secret, with or without a client secret, and the keys it
    /// recognizes: the client and peer secrets made into operator keys.
    fn keys(client: bool) -> (Credentials, MisusedKeys) {
        let peer = Key::peer(PEER).unwrap();
        let mut keys = Credentials::of_peer_key(peer.clone());
        keys.operator = KeyRing::new(Key::operator(OPERATOR).unwrap().key().clone());
        keys.client = client.then(|| KeyRing::new(Key::client(CLIENT).unwrap()));
        let mut misused = vec![
            (Key::operator(PEER).unwrap().key().clone(), Credential::Peer),
            (
                OperatorKey::of_peer_key(&peer).key().clone(),
                Credential::Peer,
            ),
        ];
        if client {
            let from_client = Key::operator(CLIENT).unwrap().key().clone();
            misused.push((from_client, Credential::Application));
        }
        (keys, misused)
    }

    /// What node 1's client port says to a client proving `key` (`None`: an empty proof).
    fn judged(keys: &(Credentials, MisusedKeys), key: Option<&Key>) -> Result<Caller, Refusal> {
        let nodes = [NodeId(2)];
        let gate = Gate {
            cluster: 9,
            port: Port::Client,
            keys: &keys.0,
            nodes: &nodes,
            me: NodeId(1),
        };
        let hello = Hello {
            version: PROTOCOL_VERSION,
            cluster: 9,
            node: None,
        };
        let challenge = Challenge {
            nonce: auth::fresh_nonce().unwrap(),
        };
        let proof = auth::answer(key, &hello, None, &challenge);
        verdict(&gate, &keys.1, (&hello, &challenge, &proof))
    }

    /// Proves a proof made from another role's secret in the operator's place is refused in
    /// the handshake naming that role, with or without a client secret; that a key the node
    /// does not know gets what it got before (refused where a client secret is set, else an
    /// application connection); and that the operator and client keys keep their roles.
    #[test]
    fn a_handshake_names_the_role_a_misused_key_proves() {
        let other = Key::operator(b"a secret this cluster never had").unwrap();
        let as_operator = Ok(Caller::Client(ClientRole::Operator));
        let application = Ok(Caller::Client(ClientRole::Application));
        let wrong = |proved| {
            Err(Refusal::WrongCredential {
                proved,
                needs: ClientRole::Operator,
            })
        };
        for client in [true, false] {
            let keys = keys(client);
            let operator = Key::operator(OPERATOR).unwrap();
            assert_eq!(judged(&keys, Some(operator.key())), as_operator);
            let from_client = Key::operator(CLIENT).unwrap();
            let from_client = judged(&keys, Some(from_client.key()));
            let from_peer = OperatorKey::of_peer_key(&Key::peer(PEER).unwrap());
            let from_peer = judged(&keys, Some(from_peer.key()));
            let unknown = judged(&keys, Some(other.key()));
            if client {
                assert_eq!(from_client, wrong(Credential::Application));
                assert_eq!(unknown, Err(Refusal::Unauthenticated));
                assert_eq!(
                    judged(&keys, Some(&Key::client(CLIENT).unwrap())),
                    application
                );
                assert_eq!(judged(&keys, None), Err(Refusal::Unauthenticated));
            } else {
                // No client secret in the node: nothing to recognize it by.
                assert_eq!(from_client, application);
                assert_eq!(unknown, application);
                assert_eq!(judged(&keys, None), application);
            }
            assert_eq!(from_peer, wrong(Credential::Peer));
        }
    }
}
