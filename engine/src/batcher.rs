//! The batcher: the leader's queue of client requests, packed into entry payloads of at most
//! the configured number of commands. It never waits for a full entry: the driver asks for an
//! entry whenever the pipeline has room, and gets whatever is queued. A request larger than the
//! room left in an entry is split into fragments across entries.

#![warn(clippy::disallowed_methods)] // sans-IO: no clock, threads or randomness (clippy.toml)

use crate::codec;
use crate::entry::{
    COMMAND_BYTES_MAX, ENTRY_COMMANDS_CONFIG_MIN, ENTRY_COMMANDS_MAX, EntryKind, FragmentHeader,
    KeyRun, PayloadBuilder, REQUEST_COMMANDS_MAX, RequestDigest,
};
use crate::handler::Handler;
use crate::ids::{ClientId, RequestNumber};
use bytes::Bytes;
use net::message::Rejection;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// Commands the batcher holds at most; a request that would pass it is refused as busy.
pub const BATCHER_COMMANDS_MAX: usize = 64 * 1024;
/// Bytes of commands the batcher holds at most; likewise.
pub const BATCHER_BYTES_MAX: usize = 64 * 1024 * 1024;

/// A validated client request waiting for an entry.
#[derive(Clone, Debug)]
pub struct Queued {
    /// The client.
    pub client: ClientId,
    /// Its request number.
    pub request: RequestNumber,
    /// The client's oldest pending request (see [`FragmentHeader::oldest_pending`]).
    pub oldest_pending: RequestNumber,
    /// The encoded commands.
    pub commands: Bytes,
    /// Where each command ends in `commands` (so that the request can be split).
    pub ends: Vec<u32>,
    /// What the commands are (every fragment carries it).
    pub digest: RequestDigest,
    /// The keyed runs of its commands, in order, each with its commands' digest (checked
    /// at admission: within the request, apart, not empty).
    pub runs: Vec<(KeyRun, RequestDigest)>,
}

impl Queued {
    fn command_count(&self) -> u32 {
        self.ends.len() as u32
    }

    /// Its commands were checked ([`command_ends`]): at most [`REQUEST_COMMANDS_MAX`] of them,
    /// the last ending where the bytes end.
    fn check(&self) {
        assert!(
            self.ends.len() <= REQUEST_COMMANDS_MAX as usize,
            "request {} of {} commands",
            self.request,
            self.ends.len()
        );
        assert_eq!(
            self.ends.last().map_or(0, |&end| end as usize),
            self.commands.len(),
            "request {}: its commands end where its bytes do not",
            self.request
        );
    }
}

/// The queue of requests and the head request's progress.
#[derive(Debug)]
pub struct Batcher {
    queue: VecDeque<Queued>,
    /// The digest of each request queued, by client and number.
    queued_keys: FxHashMap<(ClientId, RequestNumber), RequestDigest>,
    /// Commands of the head request already placed in earlier entries.
    head_sent: u32,
    queued_commands: usize,
    queued_bytes: usize,
    entry_commands_max: u32,
}

impl Batcher {
    /// Checks every invariant of the batcher; panics naming the first one broken (see
    /// [`crate::replica::Replica::check_invariants`]).
    /// Walks the queue (bounded by [`BATCHER_COMMANDS_MAX`]), not each command.
    pub fn check_invariants(&self) {
        assert!(
            (ENTRY_COMMANDS_CONFIG_MIN..=ENTRY_COMMANDS_MAX).contains(&self.entry_commands_max),
            "commands per entry {}",
            self.entry_commands_max
        );
        let (mut commands, mut bytes) = (0usize, 0usize);
        for queued in &self.queue {
            queued.check();
            assert_eq!(
                self.queued_keys.get(&(queued.client, queued.request)),
                Some(&queued.digest),
                "request {} indexed with its digest",
                queued.request
            );
            commands += queued.ends.len();
            bytes += queued.commands.len();
        }
        let head = self.queue.front().map_or(0, Queued::command_count);
        assert!(
            self.head_sent < head || self.head_sent == 0,
            "{} commands of a head request of {head} sent",
            self.head_sent
        );
        assert_eq!(
            self.queued_commands,
            commands - self.head_sent as usize,
            "commands counted waiting"
        );
        assert_eq!(self.queued_bytes, bytes, "bytes counted waiting");
        assert_eq!(
            self.queued_keys.len(),
            self.queue.len(),
            "only queued requests indexed"
        );
        assert!(
            self.queued_commands <= BATCHER_COMMANDS_MAX && self.queued_bytes <= BATCHER_BYTES_MAX,
            "the batcher holds {} commands, {} bytes: over its limits",
            self.queued_commands,
            self.queued_bytes
        );
    }

    /// The queued requests, oldest first.
    pub fn queued(&self) -> impl Iterator<Item = &Queued> {
        self.queue.iter()
    }

    /// A batcher packing at most `entry_commands_max` (16 to 1,024) commands per entry.
    pub fn new(entry_commands_max: u32) -> Self {
        assert!(
            (ENTRY_COMMANDS_CONFIG_MIN..=ENTRY_COMMANDS_MAX).contains(&entry_commands_max),
            "commands per entry must lie in {ENTRY_COMMANDS_CONFIG_MIN}..={ENTRY_COMMANDS_MAX}"
        );
        Batcher {
            queue: VecDeque::new(),
            queued_keys: FxHashMap::default(),
            head_sent: 0,
            queued_commands: 0,
            queued_bytes: 0,
            entry_commands_max,
        }
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Commands waiting.
    pub fn queued_commands(&self) -> usize {
        self.queued_commands
    }

    /// Queues a request; gives it back when the queue is full.
    pub fn push(&mut self, request: Queued) -> Result<(), Box<Queued>> {
        let over_commands = self.queued_commands + request.ends.len() > BATCHER_COMMANDS_MAX;
        let over_bytes = self.queued_bytes + request.commands.len() > BATCHER_BYTES_MAX;
        if over_commands || over_bytes {
            return Err(Box::new(request));
        }
        request.check();
        // A walk of its commands: debug builds only.
        debug_assert!(
            request.ends.windows(2).all(|w| w[0] < w[1]),
            "request {}: command ends out of order",
            request.request
        );
        let key = (request.client, request.request);
        let twice = self.queued_keys.insert(key, request.digest);
        assert!(twice.is_none(), "request {} queued twice", request.request);
        self.queued_commands += request.ends.len();
        self.queued_bytes += request.commands.len();
        self.queue.push_back(request);
        Ok(())
    }

    /// The digest of request `request` of `client` when it is queued.
    pub fn queued_digest(&self, client: ClientId, request: RequestNumber) -> Option<RequestDigest> {
        self.queued_keys.get(&(client, request)).copied()
    }

    /// The payload of the next entry, stamped `now_ms`, its command count and its kind
    /// (keyed when a fragment has keyed runs); `None` when nothing waits.
    pub fn next_entry(&mut self, now_ms: u64) -> Option<(Bytes, u32, EntryKind)> {
        if self.queue.is_empty() {
            return None;
        }
        let mut payload = PayloadBuilder::new(now_ms);
        while let Some(head) = self.queue.front() {
            let room = self.entry_commands_max - payload.command_count();
            // A registration has no commands; fragments are bounded too, so that an entry of
            // registrations stays within the payload's size limit.
            if room == 0 || payload.fragment_count() >= self.entry_commands_max {
                break;
            }
            let first = self.head_sent;
            let count = room.min(head.command_count() - first);
            let end_of = |commands: u32| match commands {
                0 => 0,
                n => head.ends[n as usize - 1],
            };
            let (start, end) = (end_of(first), end_of(first + count));
            let fragment = FragmentHeader {
                client: head.client,
                request: head.request,
                oldest_pending: head.oldest_pending,
                request_commands: head.command_count(),
                first_command: first,
                command_count: count,
                command_bytes: end - start,
                digest: head.digest,
            };
            payload.push(&fragment, &head.commands[start as usize..end as usize]);
            let overlaps = |run: &&(KeyRun, _)| run.0.first < first + count && run.0.end() > first;
            for &(run, digest) in head.runs.iter().filter(overlaps) {
                payload.push_run(run, digest);
            }
            assert!(
                payload.command_count() <= self.entry_commands_max,
                "an entry of {} commands",
                payload.command_count()
            );
            self.queued_commands -= count as usize;
            if fragment.is_last() {
                let done = self.queue.pop_front().expect("the head");
                self.queued_keys.remove(&(done.client, done.request));
                self.queued_bytes -= done.commands.len();
                self.head_sent = 0;
            } else {
                self.head_sent += count;
            }
        }
        assert!(
            self.queue
                .front()
                .is_none_or(|head| self.head_sent < head.command_count() || self.head_sent == 0),
            "the head request's commands all sent, yet it waits"
        );
        Some(payload.finish())
    }

    /// Empties the queue (leadership lost); returns the requests that were waiting.
    pub fn drain(&mut self) -> Vec<Queued> {
        self.head_sent = 0;
        self.queued_commands = 0;
        self.queued_bytes = 0;
        self.queued_keys.clear();
        self.queue.drain(..).collect()
    }
}

/// Checks a request's commands (count, size, each decodes as a command of `H`; none only for
/// a registration, request number 0, which has none) and returns where each ends, so that the
/// batcher can split the request between entries.
pub fn command_ends<H: Handler>(
    request: RequestNumber,
    commands: &[u8],
    count: u32,
) -> Result<Vec<u32>, Rejection> {
    match (request == RequestNumber(0), count) {
        (true, 0) if commands.is_empty() => return Ok(Vec::new()),
        (true, _) => return Err(Rejection::Malformed { command: 0 }),
        (false, 0) => return Err(Rejection::Empty),
        (false, _) => {}
    }
    if count > REQUEST_COMMANDS_MAX {
        return Err(Rejection::TooManyCommands { count });
    }
    let mut ends = Vec::with_capacity(count as usize);
    let mut at = 0usize;
    for command in 0..count {
        let malformed = Rejection::Malformed { command };
        let (_, used) =
            codec::decode_prefix::<H::Command>(&commands[at..]).map_err(|_| malformed.clone())?;
        if used > COMMAND_BYTES_MAX as usize {
            return Err(malformed);
        }
        at += used;
        ends.push(at as u32);
    }
    if at != commands.len() {
        return Err(Rejection::Malformed { command: count });
    }
    Ok(ends)
}

/// Checks a keyed request's runs against its commands (`ends`, from [`command_ends`]): each
/// holds a command at least, lies within the request, and starts after the one before it
/// ends. Returns each with the digest of its commands, the one request 1 of the key's session
/// would carry.
pub fn keyed_runs(
    runs: &[KeyRun],
    commands: &[u8],
    ends: &[u32],
) -> Result<Vec<(KeyRun, RequestDigest)>, Rejection> {
    let mut checked = Vec::with_capacity(runs.len());
    let mut next_free = 0;
    for &run in runs {
        let fits = run.count > 0 && run.first >= next_free;
        if !fits || run.end() as usize > ends.len() {
            return Err(Rejection::Malformed { command: run.first });
        }
        let start = match run.first {
            0 => 0,
            first => ends[first as usize - 1] as usize,
        };
        let end = ends[run.end() as usize - 1] as usize;
        checked.push((run, RequestDigest::of(run.count, &commands[start..end])));
        next_free = run.end();
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::parse_payload;

    fn request(client: u128, number: u64, commands: u32) -> Queued {
        let bytes: Vec<u8> = (0..commands).flat_map(|c| [c as u8; 3]).collect();
        Queued {
            client: ClientId(client),
            request: RequestNumber(number),
            oldest_pending: RequestNumber(number),
            commands: Bytes::from(bytes),
            ends: (1..=commands).map(|c| c * 3).collect(),
            digest: RequestDigest::default(),
            runs: Vec::new(),
        }
    }

    /// The fragments of each entry the batcher forms: (client, first command, count, bytes).
    /// (client, first command, count, bytes) of one fragment.
    type Shape = (u128, u32, u32, Vec<u8>);

    fn drain_entries(batcher: &mut Batcher) -> Vec<Vec<Shape>> {
        std::iter::from_fn(|| batcher.next_entry(0))
            .map(|(payload, _, _)| {
                parse_payload(&payload)
                    .unwrap()
                    .1
                    .into_iter()
                    .map(|(f, bytes)| {
                        (f.client.0, f.first_command, f.command_count, bytes.to_vec())
                    })
                    .collect()
            })
            .collect()
    }

    /// Proves small requests share an entry up to the maximum, a large one is split into
    /// fragments that carry exactly its command bytes, and nothing waits for a full entry.
    /// Proves the batcher knows each queued request by client and number, with its digest,
    /// while any of it waits (a request split between entries too), and forgets it once its
    /// last command is placed or the queue is drained.
    #[test]
    fn a_queued_request_is_known_until_its_last_command_is_placed() {
        let mut batcher = Batcher::new(16);
        batcher.push(request(1, 7, 24)).unwrap();
        batcher.push(request(2, 3, 4)).unwrap();
        let digest = Some(RequestDigest::default());
        assert_eq!(batcher.queued_digest(ClientId(1), RequestNumber(7)), digest);
        assert_eq!(batcher.queued_digest(ClientId(1), RequestNumber(8)), None);
        batcher
            .next_entry(0)
            .expect("16 of the first request's 24 commands");
        assert_eq!(batcher.queued_digest(ClientId(1), RequestNumber(7)), digest);
        batcher
            .next_entry(0)
            .expect("its last 8, and the second request");
        assert_eq!(batcher.queued_digest(ClientId(1), RequestNumber(7)), None);
        assert_eq!(batcher.queued_digest(ClientId(2), RequestNumber(3)), None);
        batcher.push(request(3, 1, 1)).unwrap();
        batcher.drain();
        assert_eq!(batcher.queued_digest(ClientId(3), RequestNumber(1)), None);
        batcher.check_invariants();
    }

    #[test]
    fn packs_and_splits() {
        let mut batcher = Batcher::new(16);
        batcher.push(request(1, 1, 10)).unwrap();
        batcher.push(request(2, 1, 10)).unwrap();
        batcher.push(request(3, 1, 40)).unwrap();
        let entries = drain_entries(&mut batcher);
        let shape: Vec<Vec<(u128, u32, u32)>> = entries
            .iter()
            .map(|e| e.iter().map(|(c, f, n, _)| (*c, *f, *n)).collect())
            .collect();
        assert_eq!(
            shape,
            vec![
                vec![(1, 0, 10), (2, 0, 6)],
                vec![(2, 6, 4), (3, 0, 12)],
                vec![(3, 12, 16)],
                vec![(3, 28, 12)],
            ]
        );
        let third: Vec<u8> = entries
            .iter()
            .flatten()
            .filter(|(c, ..)| *c == 3)
            .flat_map(|(.., b)| b.clone())
            .collect();
        assert_eq!(third, request(3, 1, 40).commands.to_vec());
        assert!(batcher.is_empty());
        assert_eq!(batcher.queued_commands(), 0);

        batcher.push(request(4, 1, 1)).unwrap();
        assert_eq!(
            drain_entries(&mut batcher).len(),
            1,
            "one lone command makes an entry at once"
        );
    }

    /// Proves a keyed request's runs are checked at admission (each digest is its own
    /// commands'), and that each entry lists the runs its fragment overlaps, a run split
    /// between entries in both, so that an entry without runs stays of the plain kind.
    #[test]
    fn keyed_runs_follow_their_fragments() {
        use crate::entry::parse_payload_of;
        let run = |key: u128, first: u32, count: u32| KeyRun {
            key: ClientId(key),
            first,
            count,
        };
        let plain = request(1, 1, 8);
        let keyed = request(2, 1, 20);
        let runs = [run(7, 0, 2), run(8, 9, 4), run(9, 19, 1)];
        let checked = keyed_runs(&runs, &keyed.commands, &keyed.ends).expect("valid runs");
        assert_eq!(checked[1].1, RequestDigest::of(4, &keyed.commands[27..39]));
        for bad in [[run(1, 0, 0)], [run(1, 19, 2)], [run(1, 20, 1)]] {
            let refused = keyed_runs(&bad, &keyed.commands, &keyed.ends);
            assert_eq!(
                refused,
                Err(Rejection::Malformed {
                    command: bad[0].first
                })
            );
        }
        let overlapping = [run(1, 0, 3), run(2, 2, 1)];
        assert!(keyed_runs(&overlapping, &keyed.commands, &keyed.ends).is_err());

        let mut batcher = Batcher::new(16);
        batcher.push(plain).unwrap();
        batcher
            .push(Queued {
                runs: checked,
                ..keyed
            })
            .unwrap();
        batcher.push(request(3, 1, 4)).unwrap();
        let mut listed = Vec::new();
        while let Some((payload, _, kind)) = batcher.next_entry(0) {
            let (_, _, runs) = parse_payload_of(kind, &payload).expect("parses");
            let keys: Vec<u128> = runs.iter().map(|keyed| keyed.run.key.0).collect();
            assert_eq!(kind == EntryKind::KeyedCommands, !keys.is_empty());
            listed.push(keys);
        }
        // Entry 1: client 1's 8 and commands 0..8 of client 2's; entry 2: 8..20 and client 3's.
        assert_eq!(listed, vec![vec![7], vec![8, 9]]);
    }

    /// Proves the queue refuses requests past its bound and drains on leadership loss.
    #[test]
    fn bounded_and_drainable() {
        let mut batcher = Batcher::new(1024);
        let mut pushed = 0;
        while batcher.push(request(1, pushed + 1, 1024)).is_ok() {
            pushed += 1;
        }
        assert_eq!(pushed as usize * 1024, BATCHER_COMMANDS_MAX);
        assert_eq!(batcher.drain().len(), pushed as usize);
        assert!(batcher.is_empty());
        assert!(batcher.next_entry(0).is_none());
    }
}
