//! The handshake on every connection (see [`net::auth`]): the caller's side, async for node
//! connections and clients and blocking for the WAL thread's acknowledgements, and the
//! listener's side.

use crate::codec::{self, CodecError};
use futures::{SinkExt, StreamExt};
use net::auth::{self, Gate, Key};
use net::frame::{FrameCodec, FrameError};
use net::message::{Admission, Challenge, Hello, Proof, Refusal};
use tokio::net::TcpStream;
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
}

async fn next<T: codec::Decode<()>>(
    frames: &mut Framed<TcpStream, FrameCodec>,
) -> Result<T, HandshakeError> {
    let frame = frames.next().await.ok_or(HandshakeError::Closed)??;
    Ok(codec::decode(&frame)?)
}

/// The caller's side: hello, answer the challenge, wait for admission.
pub async fn introduce(
    frames: &mut Framed<TcpStream, FrameCodec>,
    hello: &Hello,
    key: Option<&Key>,
) -> Result<(), HandshakeError> {
    frames.send(hello).await?;
    let challenge: Challenge = next(frames).await?;
    frames.send(&auth::answer(key, hello, &challenge)).await?;
    match next(frames).await? {
        Admission::Accepted => Ok(()),
        Admission::Refused(refusal) => Err(HandshakeError::Refused(refusal)),
    }
}

/// The caller's side on a blocking socket (whose read timeout bounds each wait).
pub(crate) fn introduce_blocking(
    stream: &mut std::net::TcpStream,
    codec: FrameCodec,
    hello: &Hello,
    key: Option<&Key>,
) -> Result<(), HandshakeError> {
    use std::io::Write;
    let write = |stream: &mut std::net::TcpStream, frame: bytes::BytesMut| {
        stream.write_all(&frame).map_err(FrameError::Io)
    };
    write(stream, codec.frame(hello)?)?;
    let challenge: Challenge = codec::decode(&codec.read_frame(stream)?)?;
    write(stream, codec.frame(&auth::answer(key, hello, &challenge))?)?;
    match codec::decode(&codec.read_frame(stream)?)? {
        Admission::Accepted => Ok(()),
        Admission::Refused(refusal) => Err(HandshakeError::Refused(refusal)),
    }
}

/// The listener's side: read the hello, challenge it, check the proof, admit or refuse. A
/// refusal is sent before the error returns (best effort: the caller bounds the time).
pub(crate) async fn admit(
    frames: &mut Framed<TcpStream, FrameCodec>,
    gate: &Gate<'_>,
) -> Result<Hello, HandshakeError> {
    let outcome = async {
        let hello: Hello = next(frames).await?;
        gate.hello(&hello).map_err(HandshakeError::Refused)?;
        let challenge = Challenge {
            nonce: auth::fresh_nonce().map_err(FrameError::Io)?,
        };
        frames.send(&challenge).await?;
        let proof: Proof = next(frames).await?;
        match gate.proof(&hello, &challenge, &proof) {
            Admission::Accepted => Ok(hello),
            Admission::Refused(refusal) => Err(HandshakeError::Refused(refusal)),
        }
    }
    .await;
    match outcome {
        Ok(hello) => {
            frames.send(&Admission::Accepted).await?;
            Ok(hello)
        }
        Err(error) => {
            if let Some(refusal) = error.refusal() {
                let _ = frames.send(&Admission::Refused(refusal)).await;
            }
            Err(error)
        }
    }
}
