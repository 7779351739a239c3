//! The handshake on every connection (see [`net::auth`]): the caller's side, async for node
//! connections and clients and blocking for the WAL thread's acknowledgements, and the
//! listener's side. Frames are held to [`HANDSHAKE_FRAME_BODY_BYTES_MAX`] until the
//! connection is admitted.

use crate::codec::{self, CodecError};
use crate::ids::NodeId;
use futures::{SinkExt, StreamExt};
use net::auth::{self, Caller, Gate, Key};
use net::frame::{FrameCodec, FrameError, HANDSHAKE_FRAME_BODY_BYTES_MAX};
use net::message::{Admission, Challenge, Hello, PROTOCOL_VERSION, Proof, Refusal};

/// What a handshake runs over: a TCP stream, in clear or in TLS.
pub trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin {}

impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> Io for S {}
use tokio_util::codec::Framed;

/// Why a handshake did not admit the connection.
#[derive(Debug, thiserror::Error)]
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

/// The listener's side: read the hello, challenge it, check the proof. Returns the caller's
/// hello and who the proof shows it is once the proof holds, without admitting it yet ([`welcome`] does, or the caller sends
/// a refusal of its own, a limit say). A refusal here is sent before the error returns (best
/// effort: the caller bounds the time). The codec's limit is the handshake's meanwhile.
pub(crate) async fn admit<S: Io>(
    frames: &mut Framed<S, FrameCodec>,
    gate: &Gate<'_>,
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
        let caller = gate
            .proof(&hello, &challenge, &proof)
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
