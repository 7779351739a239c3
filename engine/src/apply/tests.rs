//! Unit tests of the apply path's client sessions: eviction through the age index, expiry by
//! age on the state clock, and that replicas fed the same entries keep the same sessions.

use super::{CommittedAnswer, Mode, ReplyStatus, SESSIONS_AGED_PER_ENTRY_MAX, StateMachine};
use crate::entry::{
    Entry, EntryHash, FragmentHeader, KeyRun, PayloadBuilder, RequestDigest, encode_commands,
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
pub(super) struct Refused;

impl From<StateError> for Refused {
    fn from(_: StateError) -> Self {
        Refused
    }
}

/// A handler whose command `n` writes `n` under `n % 8` and answers `n`.
pub(super) struct Writer;

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
pub(super) fn machine(limit: usize) -> StateMachine<Writer> {
    let mut machine = StateMachine::new(Writer, 1 << 26);
    machine.set_sessions_max(limit);
    machine
}

/// Seconds of retention in the age tests.
pub(super) const RETENTION_S: u64 = 1;
/// The leader's clock at the start of the age tests, in ms since the Unix epoch.
pub(super) const T0_MS: u64 = 1_764_000_000_000;

/// A state machine keeping sessions [`RETENTION_S`] inactive, and many of them.
pub(super) fn aging() -> StateMachine<Writer> {
    let mut machine = machine(1 << 16);
    machine.set_session_retention_s(RETENTION_S);
    machine
}

/// The outcome of a request answered with one command's results, decoded.
fn answered(statuses: &[ReplyStatus]) -> Vec<u64> {
    let [ReplyStatus::Results(results)] = statuses else {
        panic!("one request answered with results: {statuses:?}")
    };
    let outcomes = super::decode_outcomes::<Writer>(results, 1).expect("outcomes decode");
    outcomes
        .into_iter()
        .map(|o| match o {
            crate::handler::Outcome::Done(n) => n,
            other @ (crate::handler::Outcome::Failed(_) | crate::handler::Outcome::Invalid) => {
                panic!("{other:?}")
            }
        })
        .collect()
}

/// The whole request `number` of `client`, of `commands`: its fragment and encoded commands.
pub(super) fn request(client: u128, number: u64, commands: &[u64]) -> (FragmentHeader, Vec<u8>) {
    part(client, number, commands, commands.len())
}

/// The first `take` commands of `client`'s request `number` of `commands`.
pub(super) fn part(
    client: u128,
    number: u64,
    commands: &[u64],
    take: usize,
) -> (FragmentHeader, Vec<u8>) {
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

/// A fragment and its encoded commands, with its keyed runs and their digests.
pub(super) type KeyedFragment = ((FragmentHeader, Vec<u8>), Vec<(KeyRun, RequestDigest)>);

/// Forms chained command entries, each stamped with the leader's clock given.
pub(super) struct Log {
    prev: EntryHash,
    next: EntryIndex,
}

impl Log {
    pub(super) fn new() -> Self {
        Log {
            prev: EntryHash::default(),
            next: EntryIndex(1),
        }
    }

    /// The next entry: `fragments`, stamped `now_ms`.
    pub(super) fn entry(&mut self, now_ms: u64, fragments: &[(FragmentHeader, Vec<u8>)]) -> Entry {
        let unkeyed: Vec<_> = fragments.iter().map(|f| (f.clone(), Vec::new())).collect();
        self.keyed_entry(now_ms, &unkeyed)
    }

    /// The next entry: `fragments`, each with its keyed runs and their digests, stamped
    /// `now_ms` (of kind `KeyedCommands` when a fragment has runs).
    pub(super) fn keyed_entry(&mut self, now_ms: u64, fragments: &[KeyedFragment]) -> Entry {
        let mut payload = PayloadBuilder::new(now_ms);
        for ((fragment, bytes), runs) in fragments {
            payload.push(fragment, bytes);
            for &(run, digest) in runs {
                payload.push_run(run, digest);
            }
        }
        let (payload, count, kind) = payload.finish();
        let index = self.next;
        let entry = Entry::seal(
            index,
            Term(1),
            kind,
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
pub(super) fn apply(machine: &mut StateMachine<Writer>, entry: &Entry) -> Vec<ReplyStatus> {
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

/// Proves expired marks are forgotten in the order they were made: a session left in the
/// middle of a request, which expires by age long after its last activity, gets a mark's
/// whole life like any other, rather than being forgotten at once for its old activity.
#[test]
fn a_mark_is_forgotten_in_the_order_it_was_made() {
    const LIMIT: usize = 16;
    let mut machine = machine(LIMIT);
    machine.set_session_retention_s(RETENTION_S);
    let mut log = Log::new();
    let half = part(1, 1, &[1, 2], 1);
    apply(&mut machine, &log.entry(T0_MS, &[half]));
    // Every mark the cap allows, made by count eviction, all at T0.
    let marks = super::EXPIRED_SESSIONS_PER_SESSION * LIMIT;
    for client in 2..=(LIMIT + marks) as u128 {
        apply(&mut machine, &log.entry(T0_MS, &[request(client, 1, &[9])]));
    }
    assert!(machine.sessions().get(ClientId(2)).unwrap().is_expired());
    // Past the retention every live session expires, the unfinished one first.
    let later = T0_MS + RETENTION_S * 1_000 + 1;
    let next = (LIMIT + marks + 1) as u128;
    apply(&mut machine, &log.entry(later, &[request(next, 1, &[9])]));
    let unfinished = machine.sessions().get(ClientId(1));
    assert!(
        unfinished.is_some_and(|s| s.is_expired()),
        "the unfinished session's mark is kept: {unfinished:?}"
    );
    assert!(
        machine.sessions().get(ClientId(2)).is_none(),
        "the first mark made goes"
    );
}

/// Proves a session inactive for longer than the retention, by the leaders' times in the log,
/// answers a retry of its request `Expired` and runs nothing (at apply and at admission), while
/// one inactive exactly the retention still answers with the first results.
#[test]
fn a_session_past_the_retention_answers_expired() {
    let mut machine = aging();
    let mut log = Log::new();
    let first = request(1, 1, &[7]);
    assert_eq!(
        answered(&apply(
            &mut machine,
            &log.entry(T0_MS, std::slice::from_ref(&first))
        )),
        [7]
    );
    let at_retention = T0_MS + RETENTION_S * 1_000;
    let retry = apply(
        &mut machine,
        &log.entry(at_retention, std::slice::from_ref(&first)),
    );
    assert_eq!(answered(&retry), [7], "kept for the retention itself");
    // A retry is not activity: the session was last active at T0.
    let other = request(2, 1, &[8]);
    apply(&mut machine, &log.entry(at_retention + 1, &[other]));
    assert!(machine.sessions().get(ClientId(1)).unwrap().is_expired());
    let (digest, hash) = (first.0.digest, machine.state_hash());
    assert_eq!(
        machine.committed_answer(ClientId(1), RequestNumber(1), digest),
        CommittedAnswer::Expired
    );
    let retry = apply(&mut machine, &log.entry(at_retention + 2, &[first]));
    assert_eq!(retry, [ReplyStatus::Expired]);
    let next = apply(
        &mut machine,
        &log.entry(at_retention + 3, &[request(1, 2, &[9])]),
    );
    assert_eq!(next, [ReplyStatus::Expired]);
    assert_eq!(machine.state_hash(), hash, "nothing ran");
    assert_eq!(
        machine.committed_session(ClientId(1)),
        (RequestNumber(2), true)
    );
}

/// Proves an entry expires at most [`SESSIONS_AGED_PER_ENTRY_MAX`] sessions, least recently
/// active first, the rest with the next entries; and that a session past the retention not
/// yet marked is answered `Expired` all the same.
#[test]
fn expiry_is_bounded_per_entry_and_exact() {
    let mut machine = aging();
    let mut log = Log::new();
    let clients = SESSIONS_AGED_PER_ENTRY_MAX as u128 + 10;
    let requests: Vec<_> = (1..=clients).map(|c| request(c, 1, &[1])).collect();
    for chunk in requests.chunks(256) {
        apply(&mut machine, &log.entry(T0_MS, chunk));
    }
    let later = T0_MS + 2_000;
    let last = requests.last().unwrap().clone();
    assert_eq!(
        apply(&mut machine, &log.entry(later, &[last])),
        [ReplyStatus::Expired]
    );
    let expired = |m: &StateMachine<Writer>| {
        (1..=clients)
            .filter(|c| m.sessions().get(ClientId(*c)).unwrap().is_expired())
            .count()
    };
    assert_eq!(expired(&machine), SESSIONS_AGED_PER_ENTRY_MAX);
    assert!(
        machine.sessions().get(ClientId(1)).unwrap().is_expired(),
        "oldest first"
    );
    assert!(
        !machine
            .sessions()
            .get(ClientId(clients))
            .unwrap()
            .is_expired()
    );
    assert!(
        machine.committed_session(ClientId(clients)).1,
        "answered expired"
    );
    apply(&mut machine, &log.entry(later + 1, &[]));
    assert_eq!(expired(&machine), clients as usize);
}

/// Proves the state clock never goes back: an entry of a new leader whose clock is behind the
/// old one's leaves the state clock where it was, and a session it opens counts as active at
/// the state clock, not at the older time (it would otherwise expire early).
#[test]
fn the_state_clock_never_goes_back() {
    let mut machine = aging();
    let mut log = Log::new();
    apply(
        &mut machine,
        &log.entry(T0_MS + 10_000, &[request(1, 1, &[1])]),
    );
    assert_eq!(machine.sessions().clock_ms(), T0_MS + 10_000);
    apply(
        &mut machine,
        &log.entry(T0_MS + 5_000, &[request(2, 1, &[2])]),
    );
    assert_eq!(
        machine.sessions().clock_ms(),
        T0_MS + 10_000,
        "behind: ignored"
    );
    let two = machine.sessions().get(ClientId(2)).unwrap();
    assert_eq!(two.last_active_ms, T0_MS + 10_000);
    apply(&mut machine, &log.entry(T0_MS + 10_900, &[]));
    assert!(!machine.sessions().get(ClientId(2)).unwrap().is_expired());
    apply(&mut machine, &log.entry(T0_MS + 11_001, &[]));
    assert!(machine.sessions().get(ClientId(2)).unwrap().is_expired());
}

/// The entries of the agreement test: clients 1 to 3 at T0, a snapshot point, then a retry of
/// client 1 past the retention and a new request of each.
fn agreement_entries() -> (Vec<Entry>, Vec<Entry>) {
    let mut log = Log::new();
    let before = vec![
        log.entry(T0_MS, &[request(1, 1, &[1]), request(2, 1, &[2])]),
        log.entry(T0_MS + 600, &[request(3, 1, &[3])]),
    ];
    let after = vec![
        log.entry(T0_MS + 1_500, &[request(1, 1, &[1])]),
        log.entry(T0_MS + 1_600, &[request(1, 2, &[4]), request(3, 2, &[5])]),
        log.entry(T0_MS + 1_700, &[request(2, 2, &[6])]),
    ];
    (before, after)
}

/// Proves replicas that apply the same entries agree on expiry by age, one of them restarted
/// from a snapshot in between (the state clock and the sessions' times travel in it): the same
/// answers, state hash and snapshot bytes. A replica that lost the clock would count clients 1
/// and 2 as active at the restart and run their requests 2.
#[test]
fn replicas_agree_on_expiry_across_a_snapshot() {
    let (before, after) = agreement_entries();
    let (mut whole, mut restarted) = (aging(), aging());
    for entry in &before {
        apply(&mut whole, entry);
        apply(&mut restarted, entry);
    }
    let (_, file) = restarted.snapshot_file().expect("a snapshot");
    let snapshot = crate::snapshot::parse_snapshot(&file).expect("it parses");
    assert_eq!(snapshot.clock_ms, T0_MS + 600);
    // A node sets its limits, then installs, as recovery does.
    let mut restarted = aging();
    restarted.install(snapshot).expect("it installs");
    restarted.check_invariants();
    let mut answers = Vec::new();
    for entry in &after {
        let answer = apply(&mut whole, entry);
        assert_eq!(
            answer,
            apply(&mut restarted, entry),
            "entry {}",
            entry.index()
        );
        answers.push(answer);
    }
    let expired = ReplyStatus::Expired;
    assert_eq!(
        answers[0],
        [ReplyStatus::Expired],
        "client 1's retry, 1.5 s on"
    );
    assert_eq!(answers[1][0], expired, "client 1's next request");
    assert_eq!(
        answered(&answers[1][1..]),
        [5],
        "client 3, active 1 s before"
    );
    assert_eq!(answers[2], [expired], "client 2");
    assert_eq!(whole.state_hash(), restarted.state_hash());
    assert_eq!(
        whole.snapshot_file().unwrap().1,
        restarted.snapshot_file().unwrap().1
    );
}

/// Proves the state clock and the expiry it causes are undone with a leader's speculation:
/// while an entry that expires a session is only simulated, the committed answers still find
/// the session; discarded, the session and the clock are as committed.
#[test]
fn a_discarded_speculation_undoes_the_clock_and_its_expiry() {
    let mut machine = aging();
    machine.set_mode(Mode::Performance);
    let mut log = Log::new();
    let first = request(1, 1, &[7]);
    apply(
        &mut machine,
        &log.entry(T0_MS, std::slice::from_ref(&first)),
    );
    machine.simulate(&log.entry(T0_MS + 5_000, &[request(2, 1, &[1])]));
    assert_eq!(machine.sessions().clock_ms(), T0_MS + 5_000, "speculated");
    assert!(machine.sessions().get(ClientId(1)).unwrap().is_expired());
    let digest = first.0.digest;
    let answer = machine.committed_answer(ClientId(1), RequestNumber(1), digest);
    assert!(
        matches!(answer, CommittedAnswer::Finished(1, _)),
        "{answer:?}"
    );
    assert_eq!(
        machine.committed_session(ClientId(1)),
        (RequestNumber(2), false)
    );
    machine.discard_simulations();
    machine.check_invariants();
    assert_eq!(machine.sessions().clock_ms(), T0_MS);
    assert!(!machine.sessions().get(ClientId(1)).unwrap().is_expired());
}

/// What a journaling machine keeps of `entry`: each change's position, command and outcome,
/// decoded.
fn journaled(applied: &super::Applied) -> Vec<(u32, u64, u64)> {
    let changes = applied.ran.changes().expect("the changes read back");
    let decode = |bytes: &[u8]| crate::codec::decode::<u64>(bytes).expect("a u64");
    let outcome =
        |bytes: &[u8]| match crate::codec::decode::<crate::handler::OutcomeOf<Writer>>(bytes) {
            Ok(crate::handler::Outcome::Done(n)) => n,
            other => panic!("{other:?}"),
        };
    changes
        .iter()
        .map(|c| (c.position, decode(c.command), outcome(c.outcome)))
        .collect()
}

/// Proves a journaling machine keeps each command that ran with its outcome, positioned over
/// the entry's fragments, and nothing of a retried request it does not run again; the same
/// whether the entry executes, a Performance speculation of it is confirmed, or Verify
/// checks it while the next entry waits to be simulated (its simulation starts before the
/// checked entry's record is handed out).
#[test]
fn journaled_changes_are_the_commands_that_ran() {
    let ways = [
        (Mode::Performance, false),
        (Mode::Performance, true),
        (Mode::Verify, true),
    ];
    for (mode, speculating) in ways {
        let mut machine = machine(16);
        machine.set_journaling(true);
        machine.set_mode(mode);
        let mut log = Log::new();
        let first = log.entry(T0_MS, &[request(1, 1, &[10, 11]), request(2, 1, &[20])]);
        // Client 1's request again (a retry), and client 2's next.
        let second = log.entry(T0_MS, &[request(1, 1, &[10, 11]), request(2, 2, &[21, 22])]);
        if speculating {
            // Both proposed before the first commits.
            machine.simulate(&first);
            machine.simulate(&second);
        }
        let mut ran = Vec::new();
        for entry in [&first, &second] {
            let applied = machine.apply(entry).expect("the entry applies");
            machine.check_invariants();
            ran.push((journaled(&applied), applied.ran.fingerprints.clone()));
        }
        assert_eq!(
            ran[0].0,
            [(0, 10, 10), (1, 11, 11), (2, 20, 20)],
            "{speculating}"
        );
        assert_eq!(ran[1].0, [(2, 21, 21), (3, 22, 22)], "{speculating}");
        assert_eq!(&ran[1].1[..2], [0, 0], "the retry ran nothing");
        assert!(ran[1].1[2..].iter().all(|&f| f != 0));
    }
}
