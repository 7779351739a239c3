//! Callers' keys in the simulated clients' requests (seeds whose [`super::Swarm::keyed_percent`]
//! is not zero). A key rides inside a write request over a run of its commands
//! ([`net::message::SubmitKeyed`]), as a gateway sends a caller's Idempotency-Key. Keys come
//! from a small pool that every client of the run shares, so that one key reaches the cluster
//! from several clients, as when two gateways retry one caller's call: mostly with the
//! commands it was first drawn with (each copy must be answered the outcomes of the one that
//! ran, and run nothing), sometimes with others (answered reused, not run). Now and then a
//! lane sends a key alone, as request 1 of the key's own session (as gateways did before
//! keyed runs): the same key as in the runs.

use super::{Sim, Workload};
use crate::client::Requests;
use crate::codec;
use crate::entry::encode_commands;
use crate::handler::Handler;
use crate::ids::{ClientId, RequestNumber};
use crate::rng::Rng;
use net::message::KeyRun;

/// Keys in a run's pool (few, so that each is sent many times, by every client).
pub const SIM_KEYS: u64 = 6;
/// The id of the session of the pool's first key: far above the clients' ids (1 to the
/// number of clients), so that no client's session is a key's.
pub const SIM_KEY_ID_FIRST: u128 = 1 << 64;
/// Commands a key covers, at most.
pub const SIM_KEY_COMMANDS_MAX: u64 = 4;
/// Keyed runs in one request, at most.
pub const SIM_KEYED_RUNS_MAX: u64 = 2;
/// A key drawn again carries other commands than its first once in this many runs.
pub const SIM_KEY_OTHER_ONE_IN: u64 = 6;
/// A lane of a seed with keys sends a key alone instead of its next request once in this many.
pub const SIM_KEY_ALONE_ONE_IN: u64 = 12;
/// Mixed into a run's seed to seed the keys' own generator.
const SIM_KEYS_SEED_SALT: u64 = 0x6B65_7973_5EED_0001;

type Cmd<W> = <<W as Workload>::H as Handler>::Command;

/// The session id of the pool's key `k`.
fn key_id(k: usize) -> ClientId {
    ClientId(SIM_KEY_ID_FIRST + k as u128)
}

/// True when `client` is the session of a key, not of a client.
pub(super) fn is_key(client: ClientId) -> bool {
    client.0 >= SIM_KEY_ID_FIRST
}

/// The pool: each key's commands as first drawn, encoded (none before its first use), and
/// the generator every draw about keys comes from. The commands are remembered when drawn,
/// not when applied: the first to apply is whichever copy the cluster logs first, and a copy
/// with other commands may get there before it.
pub(super) struct Keys {
    /// The keys' own generator: a seed without keys draws nothing from the run's, and runs
    /// as it did before keys existed.
    pub(super) rng: Rng,
    first: Vec<Option<Vec<u8>>>,
}

impl Keys {
    /// The pool of the run from `seed`.
    pub(super) fn new(seed: u64) -> Self {
        Keys {
            rng: Rng::new(seed ^ SIM_KEYS_SEED_SALT),
            first: vec![None; SIM_KEYS as usize],
        }
    }
}

impl<W: Workload> Sim<W> {
    /// The commands of a write request as sent, `drawn` with keyed runs placed among them in
    /// the seed's share of requests, and those runs (positions in the commands as sent).
    pub(super) fn with_keys(&mut self, drawn: Vec<Cmd<W>>) -> (Vec<Cmd<W>>, Vec<KeyRun>) {
        let percent = self.swarm.keyed_percent;
        if percent == 0 || !self.keys.rng.chance(percent, 100) {
            return (drawn, Vec::new());
        }
        let mut commands = Vec::new();
        let mut runs = Vec::new();
        let mut rest = drawn.into_iter();
        for _ in 0..1 + self.keys.rng.below(SIM_KEYED_RUNS_MAX) {
            let before = self.keys.rng.below(rest.len() as u64 + 1) as usize;
            commands.extend(rest.by_ref().take(before));
            let k = self.keys.rng.below(SIM_KEYS) as usize;
            let keyed = self.key_commands(k, true);
            runs.push(KeyRun {
                key: key_id(k),
                first: commands.len() as u32,
                count: keyed.len() as u32,
            });
            commands.extend(keyed);
        }
        commands.extend(rest);
        self.report.keyed_runs += runs.len() as u64;
        (commands, runs)
    }

    /// The commands key `k` is sent with: the ones it was first drawn with (drawn now, and
    /// remembered, at its first use); when `other` allows, one time in
    /// [`SIM_KEY_OTHER_ONE_IN`] others, drawn now.
    fn key_commands(&mut self, k: usize, other: bool) -> Vec<Cmd<W>> {
        if let Some(first) = &self.keys.first[k]
            && !(other && self.keys.rng.chance(1, SIM_KEY_OTHER_ONE_IN))
        {
            return decode_commands::<W>(first);
        }
        let mut fresh = self.workload.next_request(&mut self.keys.rng);
        fresh.truncate(1 + self.keys.rng.below(SIM_KEY_COMMANDS_MAX) as usize);
        self.keys.first[k].get_or_insert_with(|| encode_commands(&fresh));
        fresh
    }

    /// Lane `client` sends a key alone, as request 1 of the key's session with the key's
    /// first commands, instead of its client's next request, when the seed sends keys and
    /// draws it; returns whether it does. The lane's own numbering waits aside meanwhile.
    pub(super) fn begin_alone(&mut self, client: usize) -> bool {
        if self.swarm.keyed_percent == 0 || !self.keys.rng.chance(1, SIM_KEY_ALONE_ONE_IN) {
            return false;
        }
        let k = self.keys.rng.below(SIM_KEYS) as usize;
        let commands = self.key_commands(k, false);
        let (bytes, count) = (encode_commands(&commands), commands.len() as u32);
        let at = self.report.events;
        let c = &mut self.clients[client];
        let key = Requests::new(c.nodes.clone(), key_id(k), RequestNumber(1));
        c.parked = Some(std::mem::replace(&mut c.requests, key));
        let submit = c.requests.begin(count, bytes);
        self.checker
            .requested(submit.client, submit.request, (commands, Vec::new()), at);
        c.current = Some(submit);
        c.runs = Vec::new();
        self.report.keys_alone += 1;
        true
    }
}

/// Commands encoded one after another, decoded (a copy of a key's first commands).
fn decode_commands<W: Workload>(mut bytes: &[u8]) -> Vec<Cmd<W>> {
    let mut commands = Vec::new();
    while !bytes.is_empty() {
        let (command, used) =
            codec::decode_prefix::<Cmd<W>>(bytes).expect("a key's commands decode as encoded");
        commands.push(command);
        bytes = &bytes[used..];
    }
    commands
}
