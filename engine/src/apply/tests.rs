//! Unit tests of the apply path's client sessions: eviction through the age index, and that
//! replicas fed the same entries keep the same sessions.

use super::{ReplyStatus, StateMachine};
use crate::entry::{
    Entry, EntryHash, EntryKind, FragmentHeader, PayloadBuilder, RequestDigest, encode_commands,
};
use crate::handler::Handler;
use crate::ids::{ClientId, EntryIndex, RequestNumber, Term};
use crate::rng::Rng;
use crate::state::{Schema, StateError, Table, Tx};

/// What each command wrote last: a command `n` puts `n` under key `n % 8`.
const WRITTEN: Table<u64, u64> = Table::new(1, "written");

/// A refused write, for the counting handler.
#[derive(Debug, crate::codec::Encode, crate::codec::Decode)]
#[codec(crate = "crate::codec")]
struct Refused;

impl From<StateError> for Refused {
    fn from(_: StateError) -> Self {
        Refused
    }
}

/// A handler whose command `n` writes `n` under `n % 8` and answers `n`.
struct Writer;

impl Handler for Writer {
    type Command = u64;
    type Output = u64;
    type Error = Refused;
    fn schema(&self) -> Schema {
        Schema::new().table(&WRITTEN)
    }
    fn execute(&self, tx: &mut Tx<'_>, command: &u64) -> Result<u64, Refused> {
        tx.put(&WRITTEN, command % 8, *command)?;
        Ok(*command)
    }
}

/// A state machine keeping at most `limit` live sessions.
fn machine(limit: usize) -> StateMachine<Writer> {
    let mut machine = StateMachine::new(Writer, 1 << 26);
    machine.set_sessions_max(limit);
    machine
}

/// The whole request `number` of `client`, of `commands`: its fragment and encoded commands.
fn request(client: u128, number: u64, commands: &[u64]) -> (FragmentHeader, Vec<u8>) {
    part(client, number, commands, commands.len())
}

/// The first `take` commands of `client`'s request `number` of `commands`.
fn part(client: u128, number: u64, commands: &[u64], take: usize) -> (FragmentHeader, Vec<u8>) {
    let whole = encode_commands(commands);
    let bytes = encode_commands(&commands[..take]);
    let fragment = FragmentHeader {
        client: ClientId(client),
        request: RequestNumber(number),
        oldest_pending: RequestNumber(number),
        request_commands: commands.len() as u32,
        first_command: 0,
        command_count: take as u32,
        command_bytes: bytes.len() as u32,
        digest: RequestDigest::of(commands.len() as u32, &whole),
    };
    (fragment, bytes)
}

/// Forms chained command entries, each stamped with the leader's clock given.
struct Log {
    prev: EntryHash,
    next: EntryIndex,
}

impl Log {
    fn new() -> Self {
        Log {
            prev: EntryHash::default(),
            next: EntryIndex(1),
        }
    }

    /// The next entry: `fragments`, stamped `now_ms`.
    fn entry(&mut self, now_ms: u64, fragments: &[(FragmentHeader, Vec<u8>)]) -> Entry {
        let mut payload = PayloadBuilder::new(now_ms);
        for (fragment, bytes) in fragments {
            payload.push(fragment, bytes);
        }
        let (payload, count) = payload.finish();
        let index = self.next;
        let entry = Entry::seal(
            index,
            Term(1),
            EntryKind::Commands,
            EntryIndex(index.0 - 1),
            count,
            payload,
            &self.prev,
        );
        (self.prev, self.next) = (entry.header.hash, index.next());
        entry
    }
}

/// Applies `entry` and checks every invariant after it; the statuses of its replies.
fn apply(machine: &mut StateMachine<Writer>, entry: &Entry) -> Vec<ReplyStatus> {
    let applied = machine.apply(entry).expect("the entry applies");
    machine.check_invariants();
    applied.replies.into_iter().map(|r| r.status).collect()
}

/// The live session a scan of every session would evict: the least recently active whose
/// request finished, ties by client id (the rule the index must keep).
fn scanned_victim(machine: &StateMachine<Writer>) -> Option<ClientId> {
    let sessions = machine.sessions().committed(&[]);
    let finished = sessions
        .iter()
        .filter(|(_, s)| !s.is_expired() && s.is_complete());
    finished
        .min_by_key(|(client, s)| (s.last_active, *client))
        .map(|(client, _)| *client)
}

/// Proves the session the age index evicts for a new client beyond the limit is the one a
/// scan of every session picks (the least recently active finished one, ties by client id),
/// over a seeded history with ties in one entry and sessions left in the middle of a request,
/// which are never evicted; and that the index agrees with the sessions after every entry.
#[test]
fn eviction_through_the_index_picks_what_a_scan_picks() {
    const LIMIT: usize = 16;
    let mut machine = machine(LIMIT);
    let (mut log, mut rng) = (Log::new(), Rng::new(11));
    let mut next_client = 1u128;
    let mut evicted = 0;
    for step in 0..400u64 {
        let victim = scanned_victim(&machine);
        let live = machine.sessions().committed(&[]);
        let live = live.iter().filter(|(_, s)| !s.is_expired()).count();
        // A new client, and up to two live ones again (often in the same entry: a tie).
        let mut fragments = vec![request(next_client, 1, &[step])];
        for (client, session) in machine.sessions().committed(&[]) {
            if !session.is_expired() && session.is_complete() && rng.below(8) == 0 {
                let number = session.request.0 + 1;
                let commands = [step, step + 1];
                // Now and then a request only half applied: the session stays unfinished.
                let take = if rng.below(4) == 0 { 1 } else { 2 };
                fragments.push(part(client.0, number, &commands, take));
            }
            if fragments.len() == 3 {
                break;
            }
        }
        next_client += 1;
        apply(&mut machine, &log.entry(step, &fragments));
        if live >= LIMIT && machine.sessions().get(ClientId(next_client - 1)).is_some() {
            let victim = victim.expect("a finished session to evict");
            assert!(
                machine.sessions().get(victim).unwrap().is_expired(),
                "step {step}: {victim:?}, the least recently active, is evicted"
            );
            evicted += 1;
        }
    }
    assert!(evicted > 300, "{evicted} evictions");
}

/// Proves a session in the middle of a request is never evicted, however old, and that once
/// more expired marks than [`super::EXPIRED_SESSIONS_PER_SESSION`] per session allowed are
/// kept, the oldest is forgotten (its client is then unknown).
#[test]
fn unfinished_sessions_stay_and_the_oldest_mark_goes() {
    const LIMIT: usize = 16;
    let mut machine = machine(LIMIT);
    let mut log = Log::new();
    let half = part(1, 1, &[1, 2], 1);
    apply(&mut machine, &log.entry(1, &[half]));
    let marks = super::EXPIRED_SESSIONS_PER_SESSION * LIMIT;
    for client in 2..=(LIMIT + marks + 1) as u128 {
        apply(&mut machine, &log.entry(2, &[request(client, 1, &[9])]));
    }
    let unfinished = machine.sessions().get(ClientId(1)).expect("kept");
    assert!(!unfinished.is_expired() && !unfinished.is_complete());
    // Clients 2..=marks+2 were evicted in order; the first of them is forgotten.
    assert!(machine.sessions().get(ClientId(2)).is_none(), "forgotten");
    assert!(machine.sessions().get(ClientId(3)).unwrap().is_expired());
    assert_eq!(
        apply(&mut machine, &log.entry(3, &[request(3, 2, &[1])])),
        vec![ReplyStatus::Expired]
    );
}
