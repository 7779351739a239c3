//! Where a publisher stands, kept durably: the position after the last change the broker
//! confirmed, in a file of its own (`{"exchange": NAME, "next": "ENTRY.POSITION", "version":
//! V}`, written to a temporary file, fsynced and renamed; `version` is the handler version in
//! force before `next`, so that an upgrade among the entries published again still shows). A restarted publisher goes on from it, so every
//! change reaches the broker at least once, and one seen twice carries the same position.

use crate::cli::changes::{PositionError, parse_position};
use crate::ids::EntryIndex;
use net::message::ChangePosition;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Why a progress file cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProgressError {
    /// It cannot be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It is not a progress file.
    #[error("{} is not a publisher's progress file: {reason}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// It is another exchange's progress: publishing from it would skip or repeat that
    /// exchange's position.
    #[error(
        "{} holds the progress of exchange {kept:?}, not {asked:?}: give each exchange its \
         own --progress file",
        path.display()
    )]
    OtherExchange {
        /// The file.
        path: PathBuf,
        /// The exchange it names.
        kept: String,
        /// The exchange asked for.
        asked: String,
    },
}

/// Where a publisher stands: the position after the last change confirmed, and the handler
/// version in force before it (absent from a file an older build wrote).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kept {
    /// The position after the last change the broker confirmed.
    pub next: ChangePosition,
    /// The handler version of the last entry confirmed, if known.
    pub version: Option<u32>,
}

/// A publisher's durable position.
#[derive(Clone, Debug)]
pub struct Progress {
    path: PathBuf,
    exchange: String,
}

impl Progress {
    /// The progress in `path` of publishing to `exchange`.
    pub fn new(path: PathBuf, exchange: &str) -> Self {
        Progress {
            path,
            exchange: exchange.to_owned(),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The position kept, or `None` when there is no file yet.
    pub fn read(&self) -> Result<Option<Kept>, ProgressError> {
        let text = match std::fs::read(&self.path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(self.io(source)),
        };
        let malformed = |reason: String| ProgressError::Malformed {
            path: self.path.clone(),
            reason,
        };
        let value: Value = serde_json::from_slice(&text).map_err(|e| malformed(e.to_string()))?;
        let kept = value["exchange"]
            .as_str()
            .ok_or_else(|| malformed("no exchange".into()))?;
        if kept != self.exchange {
            return Err(ProgressError::OtherExchange {
                path: self.path.clone(),
                kept: kept.to_owned(),
                asked: self.exchange.clone(),
            });
        }
        let next = value["next"]
            .as_str()
            .ok_or_else(|| malformed("no next".into()))?;
        let next = parse_position(next).map_err(|e: PositionError| malformed(e.to_string()))?;
        let version = &value["version"];
        let version = if version.is_null() {
            None
        } else {
            let number = version.as_u64().and_then(|v| u32::try_from(v).ok());
            Some(number.ok_or_else(|| malformed(format!("version {version} is not a u32")))?)
        };
        Ok(Some(Kept { next, version }))
    }

    /// Keeps `kept` durably.
    pub fn write(&self, kept: Kept) -> Result<(), ProgressError> {
        let next = kept.next;
        let text = json!({
            "exchange": self.exchange,
            "next": format!("{}.{}", next.index.0, next.position),
            "version": kept.version,
        });
        crate::storage::files::write_durably(&self.path, format!("{text}\n").as_bytes())
            .map_err(|e| self.io(e.source))
    }

    fn io(&self, source: std::io::Error) -> ProgressError {
        ProgressError::Io {
            path: self.path.clone(),
            source,
        }
    }
}

/// How far behind the broker is: since when the oldest change not confirmed yet has been
/// known to exist (a node's applied index, when it was seen).
#[derive(Debug, Default)]
pub struct Lag {
    /// Each applied index seen above the confirmed position, and when.
    seen: VecDeque<(EntryIndex, Instant)>,
}

impl Lag {
    /// A node had applied through `applied` at `at`.
    pub fn applied(&mut self, applied: EntryIndex, at: Instant) {
        if self.seen.back().is_none_or(|(last, _)| *last < applied) {
            self.seen.push_back((applied, at));
        }
    }

    /// Everything through `confirmed` is confirmed.
    pub fn confirmed(&mut self, confirmed: EntryIndex) {
        while self
            .seen
            .front()
            .is_some_and(|(index, _)| *index <= confirmed)
        {
            self.seen.pop_front();
        }
    }

    /// Seconds the oldest unconfirmed change has been known at `now` (0: none).
    pub fn seconds(&self, now: Instant) -> f64 {
        self.seen
            .front()
            .map_or(0.0, |(_, since)| now.duration_since(*since).as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Proves the progress reads back as written, that no file is no position, and that
    /// another exchange's file and a damaged one are refused, naming the file.
    #[test]
    fn progress_reads_back_and_refuses_another_exchanges() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("progress");
        let progress = Progress::new(path.clone(), "ledger");
        assert!(progress.read().unwrap().is_none());
        let next = ChangePosition {
            index: EntryIndex(42),
            position: 7,
        };
        for version in [Some(3), None] {
            let at = Kept { next, version };
            progress.write(at).unwrap();
            assert_eq!(progress.read().unwrap(), Some(at));
        }
        // An older build's file names no version.
        std::fs::write(&path, r#"{"exchange":"ledger","next":"42.7"}"#).unwrap();
        let older = progress.read().unwrap();
        assert_eq!(
            older,
            Some(Kept {
                next,
                version: None
            })
        );
        let other = Progress::new(path.clone(), "orders").read().unwrap_err();
        assert!(
            matches!(other, ProgressError::OtherExchange { .. }),
            "{other}"
        );
        std::fs::write(&path, "{").unwrap();
        let damaged = progress.read().unwrap_err();
        assert!(damaged.to_string().contains("progress"), "{damaged}");
    }

    /// Proves the lag is the age of the oldest applied index not confirmed yet, and none
    /// once everything seen is confirmed.
    #[test]
    fn the_lag_is_the_age_of_the_oldest_unconfirmed_change() {
        let start = Instant::now();
        let mut lag = Lag::default();
        lag.applied(EntryIndex(10), start);
        lag.applied(EntryIndex(20), start + Duration::from_secs(2));
        let now = start + Duration::from_secs(5);
        assert_eq!(lag.seconds(now), 5.0);
        lag.confirmed(EntryIndex(10));
        assert_eq!(lag.seconds(now), 3.0);
        lag.confirmed(EntryIndex(20));
        assert_eq!(lag.seconds(now), 0.0);
    }
}
