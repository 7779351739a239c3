//! The probe's command line: `key=value` words, each checked against its limit.

use crate::layout::Layout;
use crate::wire::{BATCH_COMMANDS_MAX, PAD_BYTES_MAX};
use std::ops::RangeInclusive;
use std::path::PathBuf;

/// How the probe is called.
pub const USAGE: &str = "floor [batch=N] [batches=N] [pad=BYTES] [dir=DIR] [layout=ct,mt2,pernode]";
/// Commands per batch unless `batch=` says otherwise.
const BATCH_DEFAULT: u64 = 256;
/// Batches measured per layout unless `batches=` says otherwise.
const BATCHES_DEFAULT: u64 = 20_000;
/// Batches measured per layout, at most (about an hour at the slowest layout).
const BATCHES_MAX: u64 = 10_000_000;
/// Where the WAL files go unless `dir=` says otherwise: tmpfs.
const DIR_DEFAULT: &str = "/dev/shm";

/// The probe's options.
#[derive(Debug, PartialEq)]
pub struct Options {
    /// Commands per batch, 1 to [`BATCH_COMMANDS_MAX`].
    pub batch: u32,
    /// Batches measured per layout, 1 to [`BATCHES_MAX`].
    pub batches: u32,
    /// Filler bytes after each command, 0 to [`PAD_BYTES_MAX`].
    pub pad: u32,
    /// The directory of the WAL files.
    pub dir: PathBuf,
    /// The layouts to run, in order.
    pub layouts: Vec<Layout>,
}

/// A command line the probe cannot run.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum OptionsError {
    /// A word without `=`.
    #[error("{word:?} is not key=value; usage: {USAGE}")]
    NotKeyValue {
        /// The word.
        word: String,
    },
    /// A key the probe does not know.
    #[error("unknown option {key:?}; usage: {USAGE}")]
    UnknownKey {
        /// The key.
        key: String,
    },
    /// A number out of its range, or not a number.
    #[error("{key}={value:?}: expected a whole number from {min} to {max}")]
    OutOfRange {
        /// The key.
        key: &'static str,
        /// What was given.
        value: String,
        /// The least allowed.
        min: u64,
        /// The most allowed.
        max: u64,
    },
    /// A layout name the probe does not know.
    #[error("layout {name:?}: expected ct, mt2 or pernode")]
    UnknownLayout {
        /// The name.
        name: String,
    },
}

impl Options {
    /// Reads the `key=value` words (the program's name left out).
    pub fn parse(words: impl IntoIterator<Item = String>) -> Result<Options, OptionsError> {
        let mut options = Options {
            batch: BATCH_DEFAULT as u32,
            batches: BATCHES_DEFAULT as u32,
            pad: 0,
            dir: PathBuf::from(DIR_DEFAULT),
            layouts: Layout::ALL.to_vec(),
        };
        for word in words {
            let Some((key, value)) = word.split_once('=') else {
                return Err(OptionsError::NotKeyValue { word });
            };
            match key {
                "batch" => options.batch = number("batch", value, 1..=BATCH_COMMANDS_MAX as u64)?,
                "batches" => options.batches = number("batches", value, 1..=BATCHES_MAX)?,
                "pad" => options.pad = number("pad", value, 0..=PAD_BYTES_MAX as u64)?,
                "dir" => options.dir = PathBuf::from(value),
                "layout" => options.layouts = layouts(value)?,
                _ => return Err(OptionsError::UnknownKey { key: key.into() }),
            }
        }
        Ok(options)
    }
}

/// `value` as a number within `range` (every range here fits a `u32`).
fn number(key: &'static str, value: &str, range: RangeInclusive<u64>) -> Result<u32, OptionsError> {
    assert!(*range.end() <= u64::from(u32::MAX));
    match value.parse::<u64>() {
        Ok(n) if range.contains(&n) => Ok(n as u32),
        _ => Err(OptionsError::OutOfRange {
            key,
            value: value.into(),
            min: *range.start(),
            max: *range.end(),
        }),
    }
}

/// A comma-separated list of layout names.
fn layouts(value: &str) -> Result<Vec<Layout>, OptionsError> {
    value
        .split(',')
        .map(|name| {
            Layout::from_name(name).ok_or_else(|| OptionsError::UnknownLayout { name: name.into() })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(words: &[&str]) -> Result<Options, OptionsError> {
        Options::parse(words.iter().map(|w| w.to_string()))
    }

    /// Proves the words the floor report passes are read, and the defaults fill the rest.
    #[test]
    fn the_reports_words_are_read() {
        let options = parse(&["batch=1024", "batches=5000", "pad=40", "dir=/tmp/x"]).unwrap();
        assert_eq!(
            (options.batch, options.batches, options.pad),
            (1024, 5000, 40)
        );
        assert_eq!(options.dir, PathBuf::from("/tmp/x"));
        assert_eq!(options.layouts, Layout::ALL);
        let options = parse(&["layout=pernode"]).unwrap();
        assert_eq!(
            (options.batch, options.layouts),
            (256, vec![Layout::PerNode])
        );
    }

    /// Proves every limit and every malformed word is refused with its reason.
    #[test]
    fn bad_words_are_refused() {
        assert!(matches!(
            parse(&["e2e"]),
            Err(OptionsError::NotKeyValue { .. })
        ));
        assert!(matches!(
            parse(&["fast=1"]),
            Err(OptionsError::UnknownKey { .. })
        ));
        for word in ["batch=0", "batch=1025", "batches=x", "pad=4073", "pad=-1"] {
            assert!(
                matches!(parse(&[word]), Err(OptionsError::OutOfRange { .. })),
                "{word}"
            );
        }
        assert!(parse(&["pad=0", "pad=4072"]).is_ok());
        assert!(matches!(
            parse(&["layout=ct,st"]),
            Err(OptionsError::UnknownLayout { .. })
        ));
    }
}
