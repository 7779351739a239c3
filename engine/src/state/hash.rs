//! The running state hash: blake3 over the stream of every write applied, in global order.
//!
//! Each applied write is encoded into the stream (table, operation, key, record). The stream is
//! cut into pages of [`HASH_PAGE_BYTES`]; each full page is folded into a 32-byte accumulator with a
//! keyed blake3 hash (the key is the accumulator so far). The state hash after an entry is the
//! blake3 of the accumulator, the partial page and the stream length. So:
//!
//! - the cost per entry grows with the entry's writes, never with the size of the state;
//! - the hash depends only on the write stream, not on how commands were packed into entries
//!   (16 or 1,024 per entry give the same final hash);
//! - the whole hashing state (accumulator, partial page, length) is small enough to travel in a
//!   snapshot.
//!
//! `notes/decisions/state-hash.md` explains the choice against a hash of the state's content.

pub use crate::ids::StateHash;

use crate::codec::{Decode, Encode};

/// Bytes of write stream folded into the accumulator at a time. Large, so that blake3 hashes
/// many chunks of each entry's writes in parallel and a page is folded rarely; a snapshot
/// carries at most one partial page.
pub const HASH_PAGE_BYTES: usize = 256 * 1024;

/// What a snapshot keeps of the hasher: enough to continue the same stream after a restore.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct HasherState {
    accumulator: [u8; 32],
    /// The absorbed part of the current page.
    page: Vec<u8>,
    folded_bytes: u64,
}

/// The incremental hasher over the write stream. Writers append to its page buffer directly
/// (`StreamHasher::pending`); [`StreamHasher::absorb_pending`] hashes what they appended.
#[derive(Clone)]
pub struct StreamHasher {
    accumulator: [u8; 32],
    /// The current page's bytes: `page[..hashed]` are in `page_hasher`, the rest are pending.
    page: Vec<u8>,
    hashed: usize,
    /// blake3 keyed with `accumulator`, over `page[..hashed]`.
    page_hasher: blake3::Hasher,
    /// Bytes absorbed before the current page.
    folded_bytes: u64,
}

impl Default for StreamHasher {
    fn default() -> Self {
        StreamHasher {
            accumulator: [0; 32],
            page: Vec::with_capacity(HASH_PAGE_BYTES),
            hashed: 0,
            page_hasher: blake3::Hasher::new_keyed(&[0; 32]),
            folded_bytes: 0,
        }
    }
}

impl StreamHasher {
    /// The absorbed stream's state (bytes appended and not absorbed are left out).
    pub fn save(&self) -> HasherState {
        HasherState {
            accumulator: self.accumulator,
            page: self.page[..self.hashed].to_vec(),
            folded_bytes: self.folded_bytes,
        }
    }

    /// A hasher that continues the stream `state` was saved from.
    pub fn restore(state: HasherState) -> Self {
        let mut page_hasher = blake3::Hasher::new_keyed(&state.accumulator);
        page_hasher.update(&state.page);
        let hashed = state.page.len();
        let mut page = Vec::with_capacity(HASH_PAGE_BYTES.max(hashed));
        page.extend_from_slice(&state.page);
        StreamHasher {
            accumulator: state.accumulator,
            page,
            hashed,
            page_hasher,
            folded_bytes: state.folded_bytes,
        }
    }

    /// The buffer writers append stream bytes to. Bytes appended and not yet absorbed may be
    /// truncated away (a rolled-back command or entry).
    pub(crate) fn pending(&mut self) -> &mut Vec<u8> {
        &mut self.page
    }

    /// The stream position at the end of what was appended so far (absorbed or not), counted
    /// from the start of the stream: stays valid when pages fold.
    pub(crate) fn position(&self) -> u64 {
        self.folded_bytes + self.page.len() as u64
    }

    /// The appended bytes from stream position `from` on (they must not be absorbed yet).
    pub(crate) fn appended_since(&self, from: u64) -> &[u8] {
        &self.page[self.offset(from)..]
    }

    fn offset(&self, position: u64) -> usize {
        let offset = position
            .checked_sub(self.folded_bytes)
            .expect("position in the current page") as usize;
        assert!(
            offset >= self.hashed && offset <= self.page.len(),
            "only unabsorbed bytes are addressed"
        );
        offset
    }

    /// Drops appended bytes past stream position `position`.
    pub(crate) fn truncate_to(&mut self, position: u64) {
        let offset = self.offset(position);
        self.page.truncate(offset);
    }

    /// Hashes everything appended.
    pub fn absorb_pending(&mut self) {
        self.absorb_through(self.position());
    }

    /// Hashes the appended bytes up to stream position `position`, folding every full page
    /// into the accumulator; later bytes stay appended, not absorbed.
    pub(crate) fn absorb_through(&mut self, position: u64) {
        loop {
            let target = self.offset(position);
            let end = target.min(HASH_PAGE_BYTES);
            self.page_hasher.update(&self.page[self.hashed..end]);
            self.hashed = end;
            if self.hashed < HASH_PAGE_BYTES {
                return;
            }
            self.accumulator = *self.page_hasher.finalize().as_bytes();
            self.page_hasher = blake3::Hasher::new_keyed(&self.accumulator);
            self.page.drain(..HASH_PAGE_BYTES);
            self.hashed = 0;
            self.folded_bytes += HASH_PAGE_BYTES as u64;
        }
    }

    /// Appends `bytes` to the stream and hashes them.
    pub fn absorb(&mut self, bytes: &[u8]) {
        self.page.extend_from_slice(bytes);
        self.absorb_pending();
    }

    /// The hash of the whole stream absorbed so far (bytes appended and not absorbed excluded).
    pub fn digest(&self) -> StateHash {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&self.accumulator);
        hasher.update(self.page_hasher.finalize().as_bytes());
        hasher.update(&self.stream_bytes().to_le_bytes());
        StateHash(*hasher.finalize().as_bytes())
    }

    /// Bytes absorbed since the start.
    pub fn stream_bytes(&self) -> u64 {
        self.folded_bytes + self.hashed as u64
    }

    /// Checks the hasher's shape: the absorbed part of the page is inside the page and short
    /// of a whole one (a whole page is folded at once), and only whole pages were folded.
    pub(crate) fn check_invariants(&self) {
        assert!(
            self.hashed <= self.page.len(),
            "{} bytes of a page of {} absorbed",
            self.hashed,
            self.page.len()
        );
        assert!(
            self.hashed < HASH_PAGE_BYTES,
            "{} bytes of the current page absorbed: a whole page is folded",
            self.hashed
        );
        assert_eq!(
            self.folded_bytes % HASH_PAGE_BYTES as u64,
            0,
            "only whole pages are folded"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the digest depends only on the stream, not on how it was cut into `absorb` calls.
    #[test]
    fn cut_points_do_not_matter() {
        let stream: Vec<u8> = (0..3 * HASH_PAGE_BYTES + 123)
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        let mut whole = StreamHasher::default();
        whole.absorb(&stream);
        for cut in [
            1,
            7,
            100,
            HASH_PAGE_BYTES - 1,
            HASH_PAGE_BYTES,
            HASH_PAGE_BYTES + 5,
        ] {
            let mut pieces = StreamHasher::default();
            for piece in stream.chunks(cut) {
                pieces.absorb(piece);
            }
            assert_eq!(pieces.digest(), whole.digest(), "cut every {cut} bytes");
        }
    }

    /// Proves a single changed byte, or a shorter stream, changes the digest.
    #[test]
    fn any_change_changes_the_digest() {
        let stream = vec![5u8; HASH_PAGE_BYTES + 10];
        let mut a = StreamHasher::default();
        a.absorb(&stream);
        let mut changed = stream.clone();
        changed[3] ^= 1;
        let mut b = StreamHasher::default();
        b.absorb(&changed);
        let mut c = StreamHasher::default();
        c.absorb(&stream[..stream.len() - 1]);
        assert_ne!(a.digest(), b.digest());
        assert_ne!(a.digest(), c.digest());
        assert_ne!(StreamHasher::default().digest(), a.digest());
    }

    /// Proves a saved and restored hasher continues the same stream (the digest after more
    /// bytes equals the uninterrupted one's), mid-page and across folds.
    #[test]
    fn save_and_restore_continue_the_stream() {
        let stream: Vec<u8> = (0..HASH_PAGE_BYTES + 999).map(|i| (i % 7) as u8).collect();
        for cut in [0, 5, HASH_PAGE_BYTES - 1, HASH_PAGE_BYTES + 3] {
            let mut first = StreamHasher::default();
            first.absorb(&stream[..cut]);
            first.pending().extend_from_slice(b"not absorbed");
            let mut restored = StreamHasher::restore(first.save());
            assert_eq!(restored.digest(), first.digest());
            restored.absorb(&stream[cut..]);
            let mut whole = StreamHasher::default();
            whole.absorb(&stream);
            assert_eq!(restored.digest(), whole.digest(), "cut at {cut}");
        }
    }

    /// Proves appended bytes dropped before they are absorbed leave no trace, and that bytes can
    /// be absorbed up to a position while later ones wait, across page folds.
    #[test]
    fn truncation_and_partial_absorption() {
        let mut a = StreamHasher::default();
        a.absorb(b"kept");
        let mark = a.position();
        a.pending().extend_from_slice(b"rolled back");
        a.truncate_to(mark);
        a.pending().extend_from_slice(b" and more");
        a.absorb_pending();
        let mut b = StreamHasher::default();
        b.absorb(b"kept and more");
        assert_eq!(a.digest(), b.digest());

        let stream: Vec<u8> = (0..HASH_PAGE_BYTES * 2 + 77)
            .map(|i| (i % 13) as u8)
            .collect();
        let mut staged = StreamHasher::default();
        staged.pending().extend_from_slice(&stream);
        let cut = HASH_PAGE_BYTES as u64 + 5;
        staged.absorb_through(cut);
        let mut whole = StreamHasher::default();
        whole.absorb(&stream[..cut as usize]);
        assert_eq!(
            staged.digest(),
            whole.digest(),
            "absorbed through the cut only"
        );
        assert_eq!(staged.appended_since(cut), &stream[cut as usize..]);
        staged.absorb_pending();
        whole.absorb(&stream[cut as usize..]);
        assert_eq!(staged.digest(), whole.digest());
    }
}
