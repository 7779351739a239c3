//! `GET /v1/changes?after=POSITION`: the change stream over HTTP, as newline-delimited JSON
//! (the lines of `changes --json`), from the command after POSITION on and following new
//! commits until the caller goes away. A position no node keeps any more is refused before
//! the first line (410, naming the oldest one served); one that goes during the stream ends
//! it with an error line, never with a silent gap. Read from a follower first.

use super::{Failure, Gateway};
use crate::cli::CliHandler;
use crate::cli::changes::{CHANGES_FOLLOW_WAIT_MS, CHANGES_RETRY_MS, CHANGES_STATUS_TIMEOUT_S};
use crate::cli::changes::{Lines, parse_position};
use crate::client::{ChangeStream, ChangesError, ClientConfig};
use crate::ids::EntryIndex;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Uri, header};
use axum::response::{IntoResponse, Response};
use net::message::ChangePosition;
use std::sync::Arc;
use std::time::Duration;

/// The content type of the stream.
const NDJSON: &str = "application/x-ndjson";

/// The handler of `GET /v1/changes`.
pub(super) async fn get_changes<H: CliHandler>(
    State(gateway): State<Arc<Gateway<H>>>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    match open(&gateway, &headers, &uri).await {
        Ok(response) => response,
        Err(failure) => {
            gateway.metrics.refused(failure.code());
            failure.into_response()
        }
    }
}

async fn open<H: CliHandler>(
    gateway: &Gateway<H>,
    headers: &HeaderMap,
    uri: &Uri,
) -> Result<Response, Failure> {
    gateway.authorize(headers)?;
    let publish = gateway.publish.ok_or(Failure::NoChangeStream)?;
    let from = after(uri.query().unwrap_or_default())?;
    let mut stream = ChangeStream::new(gateway.config.clone(), gateway.nodes.clone(), from);
    stream
        .prefer_followers(Duration::from_secs_f64(CHANGES_STATUS_TIMEOUT_S))
        .await;
    // The first batch decides the status: a position no node keeps is refused whole.
    let first = stream.next_batch(Duration::ZERO).await.map_err(failure)?;
    let mut lines = Lines::<H>::new(publish);
    let body = ndjson(&mut lines, &first.entries).map_err(|e| Failure::Cluster(e.to_string()))?;
    let following = futures::stream::unfold(
        Following {
            stream,
            lines,
            ended: false,
        },
        next_chunk,
    );
    let head = futures::stream::once(async move { Ok::<_, std::io::Error>(Bytes::from(body)) });
    let body = Body::from_stream(futures::StreamExt::chain(head, following));
    Ok(([(header::CONTENT_TYPE, NDJSON)], body).into_response())
}

/// The entry and position after `after=ENTRY[.POSITION]` in `query` (none, or 0: from the
/// first entry).
fn after(query: &str) -> Result<ChangePosition, Failure> {
    let value = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("after="))
        .unwrap_or("0");
    let at = parse_position(value).map_err(|e| Failure::BadPosition(e.to_string()))?;
    Ok(match at.index {
        EntryIndex::ZERO => ChangePosition {
            index: EntryIndex(1),
            position: 0,
        },
        index => ChangePosition {
            index,
            position: at.position.saturating_add(1),
        },
    })
}

/// What a stream's refusal is to a caller that has no line yet.
fn failure(error: ChangesError) -> Failure {
    match error {
        ChangesError::Gone { asked, oldest } => Failure::ChangesGone {
            asked: asked.0,
            oldest: oldest.0,
        },
        ChangesError::Missing { from, to } => Failure::ChangesMissing {
            from: from.0,
            to: to.0,
        },
        ChangesError::Unreachable(_) => Failure::Unavailable {
            reason: error.to_string(),
        },
        other @ (ChangesError::Refused { .. } | ChangesError::Off(_)) => {
            Failure::Cluster(other.to_string())
        }
    }
}

/// The lines of `entries`, each ending in a newline.
fn ndjson<H: CliHandler>(
    lines: &mut Lines<H>,
    entries: &[net::message::ChangeEntry],
) -> anyhow::Result<Vec<u8>> {
    let mut body = Vec::new();
    for entry in entries {
        lines.write(entry, |_, line| {
            body.extend_from_slice(line);
            body.push(b'\n');
        })?;
    }
    Ok(body)
}

/// A stream being followed.
struct Following<H: CliHandler> {
    stream: ChangeStream<ClientConfig>,
    lines: Lines<H>,
    ended: bool,
}

/// The next lines of a followed stream: the next batch with any, after waiting for new
/// commits; the stream ends with an error line when the position is gone meanwhile.
async fn next_chunk<H: CliHandler>(
    mut following: Following<H>,
) -> Option<(Result<Bytes, std::io::Error>, Following<H>)> {
    if following.ended {
        return None;
    }
    let wait = Duration::from_millis(CHANGES_FOLLOW_WAIT_MS);
    loop {
        let batch = match following.stream.next_batch(wait).await {
            Ok(batch) => batch,
            Err(ChangesError::Unreachable(errors)) => {
                tracing::warn!(
                    ?errors,
                    "no node answers for the change stream; asking again"
                );
                tokio::time::sleep(Duration::from_millis(CHANGES_RETRY_MS)).await;
                continue;
            }
            Err(error) => return Some((Ok(error_line(&failure(error))), following.end())),
        };
        let body = match ndjson(&mut following.lines, &batch.entries) {
            Ok(body) => body,
            Err(error) => {
                let line = error_line(&Failure::Cluster(error.to_string()));
                return Some((Ok(line), following.end()));
            }
        };
        if !body.is_empty() {
            return Some((Ok(Bytes::from(body)), following));
        }
    }
}

impl<H: CliHandler> Following<H> {
    fn end(mut self) -> Self {
        self.ended = true;
        self
    }
}

/// The line that ends a stream on an error: the failure's JSON body.
fn error_line(failure: &Failure) -> Bytes {
    let mut line = serde_json::to_vec(&failure.body()).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}
