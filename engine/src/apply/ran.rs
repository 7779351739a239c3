//! What an applied entry leaves for the apply journal: each command's outcome fingerprint by
//! position (what `replay` compares), and each command that ran with its encoded outcome (what
//! the change stream serves). Kept only while journaling.

/// Bytes of the fixed part of one change: position, command length, outcome length.
const CHANGE_FIXED_BYTES: usize = 12;

/// The commands of one entry as they were applied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ran {
    /// Each command's outcome fingerprint by position ([`super::outcome_fingerprint`]; 0: not
    /// run, a duplicate's say). Empty for an entry without commands.
    pub fingerprints: Vec<u32>,
    /// The commands that ran, in the order they ran, each `position u32 | command length u32 |
    /// command | outcome length u32 | outcome` (little-endian); [`Ran::changes`] reads them.
    pub changes: Vec<u8>,
    /// The handler version in force after the entry.
    pub version: u32,
    /// Whether the changes were kept (a leader keeps the fingerprints only: its followers
    /// keep the changes, and readers of the stream ask followers).
    pub kept: bool,
}

/// One command that ran, and its outcome, as encoded on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change<'a> {
    /// Its position in the entry (counted over the entry's fragments).
    pub position: u32,
    /// The command.
    pub command: &'a [u8],
    /// Its outcome.
    pub outcome: &'a [u8],
}

/// The changes' bytes are not a run of whole changes (a damaged or foreign record).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the changes' bytes end inside a change at byte {at}")]
pub struct MalformedChanges {
    /// Where the change that does not fit starts.
    pub at: usize,
}

impl Ran {
    /// Empties it for an entry of `commands` commands.
    pub(super) fn start(&mut self, commands: usize, kept: bool) {
        self.fingerprints.clear();
        self.fingerprints.resize(commands, 0);
        self.changes.clear();
        self.version = 0;
        self.kept = kept;
    }

    /// Records that the command at `position` ran and answered `outcome` (the command's bytes
    /// are asked for only when the changes are kept).
    pub(super) fn push<'a>(
        &mut self,
        position: usize,
        command: impl FnOnce() -> &'a [u8],
        outcome: &[u8],
    ) {
        self.fingerprints[position] = super::outcome_fingerprint(outcome);
        if self.kept {
            self.push_change(&Change {
                position: position as u32,
                command: command(),
                outcome,
            });
        }
    }

    /// Appends `change` to the changes, as applying a command that ran does (its fingerprint
    /// is left as it is).
    pub fn push_change(&mut self, change: &Change<'_>) {
        let out = &mut self.changes;
        out.extend_from_slice(&change.position.to_le_bytes());
        out.extend_from_slice(&(change.command.len() as u32).to_le_bytes());
        out.extend_from_slice(change.command);
        out.extend_from_slice(&(change.outcome.len() as u32).to_le_bytes());
        out.extend_from_slice(change.outcome);
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.fingerprints.is_empty() && self.changes.is_empty() && self.version == 0 && !self.kept
    }

    /// The commands that ran, in order.
    pub fn changes(&self) -> Result<Vec<Change<'_>>, MalformedChanges> {
        changes(&self.changes)
    }
}

/// The changes encoded in `bytes` (as [`Ran::changes`] holds them), in order.
pub fn changes(bytes: &[u8]) -> Result<Vec<Change<'_>>, MalformedChanges> {
    let mut found = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let (change, used) = change_at(&bytes[at..]).ok_or(MalformedChanges { at })?;
        found.push(change);
        at += used;
    }
    Ok(found)
}

/// The change at the front of `bytes` and its length.
fn change_at(bytes: &[u8]) -> Option<(Change<'_>, usize)> {
    if bytes.len() < CHANGE_FIXED_BYTES {
        return None;
    }
    let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    let position = u32_at(0)?;
    let command_end = 8usize.checked_add(u32_at(4)? as usize)?;
    let command = bytes.get(8..command_end)?;
    let outcome_start = command_end.checked_add(4)?;
    let outcome_end = outcome_start.checked_add(u32_at(command_end)? as usize)?;
    let outcome = bytes.get(outcome_start..outcome_end)?;
    let change = Change {
        position,
        command,
        outcome,
    };
    Some((change, outcome_end))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves changes read back as pushed, with each fingerprint at its position, and that
    /// bytes cut inside a change are refused where it starts.
    #[test]
    fn changes_read_back_as_pushed_and_a_cut_one_is_refused() {
        let mut ran = Ran::default();
        ran.start(3, true);
        ran.push(0, || b"first", b"ok");
        ran.push(2, || b"third", b"");
        let read = ran.changes().unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(
            (read[0].position, read[0].command, read[0].outcome),
            (0, &b"first"[..], &b"ok"[..])
        );
        assert_eq!(
            (read[1].position, read[1].command, read[1].outcome),
            (2, &b"third"[..], &b""[..])
        );
        assert_eq!(ran.fingerprints[1], 0, "not run");
        assert_eq!(
            ran.fingerprints[0],
            super::super::outcome_fingerprint(b"ok")
        );
        let first_len = CHANGE_FIXED_BYTES + 5 + 2;
        let cut = &ran.changes[..ran.changes.len() - 1];
        assert_eq!(changes(cut), Err(MalformedChanges { at: first_len }));
        ran.start(1, false);
        ran.push(
            0,
            || unreachable!("not asked when the changes are not kept"),
            b"ok",
        );
        assert!(ran.changes.is_empty() && ran.fingerprints[0] != 0);
        ran.start(0, false);
        assert!(ran.is_empty());
    }
}
