//! The independent oracle of `runner sim`: a plain Bank over a `BTreeMap`, with client
//! sessions of its own, written by hand from the Bank's rules (`bank/src/lib.rs`) and the
//! exactly-once rules the engine documents (`engine::ReplyStatus`, the decisions of
//! `engine::apply::Sessions`). It shares no code with the engine's apply, sessions or codec,
//! nor with the Bank's `execute`. The simulator's checker feeds it every request fragment
//! the committed log holds, duplicates included, with the reference replica's answer; the
//! oracle says where the two differ, and where the committed state differs from its accounts.
//!
//! Keyed runs (callers' keys inside requests, `engine::sim::check::Logged::runs`) go through
//! the same session model: the part of a run within the commands a fragment's own session
//! runs is decided as request 1 of the key's session would be (the key's id is a session
//! like a client's), its commands apply only when that decision applies them, and the
//! carrying request's answer shows, for each keyed command, the outcome the key's session
//! holds (`Ran`), or that the key expired or was used with other commands. A key sent alone
//! is request 1 of the same session.
//!
//! Not modeled, so either would show as a violation: session eviction (the simulator's few
//! clients stay far below `engine::apply::SESSIONS_MAX`) and a full state
//! (`BankError::CapacityExhausted`: the simulated state holds thousands of times the accounts
//! the clients use).

use bank::{ACCOUNTS, Account, AccountId, BankCommand, BankError, BankOutput};
use engine::Outcome;
use engine::RequestNumber;
use engine::apply::{KeyedOutcome, PIPELINE_REQUESTS_MAX};
use engine::internals::entry::{FragmentHeader, KeyedRun, RequestDigest};
use engine::sim::check::{Answer, Logged};
use engine::state::State;
use std::collections::BTreeMap;
use std::fmt;

/// A Bank command's outcome.
pub type BankOutcome = Outcome<BankOutput, BankError>;

/// Where a command stands in the committed log, for a violation's message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin {
    index: u64,
    client: u128,
    request: u64,
    /// The command's position in its request.
    command: u32,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "entry {}: client {} request {} command {}",
            self.index, self.client, self.request, self.command
        )
    }
}

/// Where a request's fragment stands in the committed log, for a violation's message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestAt {
    index: u64,
    client: u128,
    request: u64,
}

impl fmt::Display for RequestAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (index, client, request) = (self.index, self.client, self.request);
        write!(f, "entry {index}: client {client} request {request}")
    }
}

/// Where the reference replica and the model part. The answers are kept as their debug
/// text: the model's borrows its sessions, and the message is all a violation keeps.
#[derive(Debug, thiserror::Error)]
pub enum OracleError {
    /// The reference answered a request before its last fragment applied.
    #[error("{at}: the reference answered {answer} before its last fragment")]
    EarlyAnswer {
        /// The fragment.
        at: RequestAt,
        /// The reference's answer.
        answer: String,
    },
    /// The reference did not answer a request whose last fragment applied.
    #[error("{at}: the reference did not answer; the model says {expected}")]
    NoAnswer {
        /// The fragment.
        at: RequestAt,
        /// The model's answer.
        expected: String,
    },
    /// The reference's answer is of another kind than the model's.
    #[error("{at}: the reference answered {answer}, the model says {expected}")]
    OtherAnswer {
        /// The fragment.
        at: RequestAt,
        /// The reference's answer.
        answer: String,
        /// The model's answer.
        expected: String,
    },
    /// The reference answered another number of outcomes than the model.
    #[error("{at}: the reference has {reference} outcomes, the model {model}")]
    OutcomeCount {
        /// The fragment.
        at: RequestAt,
        /// The reference's outcomes.
        reference: usize,
        /// The model's outcomes.
        model: usize,
    },
    /// A command's outcome differs.
    #[error(
        "{at} command {position} ({:?}): the reference says {:?}, the model {:?}",
        differs.0,
        differs.1,
        differs.2
    )]
    OtherOutcome {
        /// The fragment.
        at: RequestAt,
        /// The command's position in its request.
        position: usize,
        /// The command, the reference's outcome and the model's (boxed: the other
        /// variants are small).
        differs: Box<(BankCommand, Got, Got)>,
    },
    /// The state holds an account the model does not.
    #[error("account {id} is in the state ({account:?}) but not in the model")]
    NotInModel {
        /// The account's id.
        id: u64,
        /// The state's account.
        account: Account,
    },
    /// An account of the state differs from the model's.
    #[error(
        "account {id}: the state has {state:?}, the model {model:?} (last changed at {changed_by})"
    )]
    OtherAccount {
        /// The account's id.
        id: u64,
        /// The state's account.
        state: Account,
        /// The model's account.
        model: Account,
        /// The command that opened or last changed the model's.
        changed_by: Origin,
    },
    /// The model holds an account the state does not.
    #[error(
        "account {id} is in the model (opened or changed at {changed_by}) but not in the state"
    )]
    NotInState {
        /// The account's id.
        id: u64,
        /// The command that opened or last changed the model's.
        changed_by: Origin,
    },
}

/// One account of the model.
#[derive(Clone, Copy, Debug)]
struct ModelAccount {
    balance: u64,
    /// 1 when opened, one more for every change.
    version: u64,
    flags: u32,
    /// The command that opened or last changed it.
    changed_by: Origin,
}

impl ModelAccount {
    /// The account as the Bank outputs and stores it.
    fn public(&self) -> Account {
        Account {
            balance: self.balance,
            version: self.version,
            flags: self.flags,
        }
    }
}

/// One client's session in the model: its latest request and, in order, the commands of it
/// applied so far with their outcomes.
#[derive(Debug)]
struct ModelSession {
    request: u64,
    /// Commands in the request.
    commands: u32,
    /// What the request's commands were, as its fragments say.
    digest: RequestDigest,
    applied: Applied,
    /// The client's finished requests before `request`, oldest first: their number, digest
    /// and commands with outcomes (at most `PIPELINE_REQUESTS_MAX` - 1, as the engine keeps).
    earlier: Vec<(u64, RequestDigest, Applied)>,
}

/// What a command of a request got: `Ran` with its outcome (every command outside keyed runs,
/// and a keyed one whose key's session ran it, now or before), or why a keyed one did not run.
pub type Got = KeyedOutcome<BankOutcome>;

/// A request's commands applied so far, with what each got, in order.
type Applied = Vec<(BankCommand, Got)>;

/// What the model does with a fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// Apply the fragment's commands from this position in the request on (none, for a copy
    /// of commands applied already); a new request starts from 0 with a fresh session.
    Apply { from: u32, fresh: bool },
    /// The client moved on to a newer request, or the fragment leaves a gap after what was
    /// applied of its request: nothing applies.
    Stale,
    /// The client has no session and this is not the start of its request number 1: nothing
    /// applies, since an earlier attempt might have.
    Expired,
    /// The fragment has its session's request number but other commands (its digest is not
    /// the session's): nothing applies.
    Reused,
    /// A finished request before the session's latest (one the session still keeps):
    /// nothing applies, and it is answered with its results.
    Earlier,
    /// A new request of a client with requests in flight before it, one of which has not
    /// run all its commands yet: nothing applies (the client sends it again).
    NotYet,
}

/// What the model says a fragment that ends its request must be answered.
#[derive(Debug)]
enum Expected<'a> {
    /// The request's commands with what each got, in order.
    Results(&'a [(BankCommand, Got)]),
    /// See [`Verdict::Stale`].
    Stale,
    /// See [`Verdict::Expired`].
    Expired,
    /// See [`Verdict::Reused`].
    Reused,
    /// See [`Verdict::NotYet`].
    NotYet,
}

/// The Bank by hand: accounts by id, and each client's session.
#[derive(Debug, Default)]
pub struct BankOracle {
    accounts: BTreeMap<u64, ModelAccount>,
    sessions: BTreeMap<u128, ModelSession>,
}

impl BankOracle {
    /// Takes in one fragment of the committed log: applies what the model says applies, and
    /// compares the reference's answer, if the fragment ends its request, with the model's.
    pub fn logged(&mut self, logged: Logged<'_, bank::Bank>) -> Result<(), OracleError> {
        let fragment = logged.fragment;
        let verdict = self.verdict(&fragment);
        if let Verdict::Apply { from, fresh } = verdict {
            if fresh {
                self.open_session(&fragment);
            }
            self.apply(&logged, from);
        }
        let at = RequestAt {
            index: logged.index.0,
            client: fragment.client.0,
            request: fragment.request.0,
        };
        let expected = fragment
            .is_last()
            .then(|| self.expected(&fragment, verdict));
        match (expected, &logged.answer) {
            (None, None) => Ok(()),
            (Some(expected), Some(answer)) => compare(at, &expected, answer),
            (None, Some(answer)) => Err(OracleError::EarlyAnswer {
                at,
                answer: format!("{answer:?}"),
            }),
            (Some(expected), None) => Err(OracleError::NoAnswer {
                at,
                expected: format!("{expected:?}"),
            }),
        }
    }

    /// The exactly-once rule: a client's first request is number 1; a request starts from its
    /// first command; each command of the client's latest request applies once, in order; and
    /// the order rule: a request sent while earlier ones were in flight waits ("not yet")
    /// until each of them has run whole.
    fn verdict(&self, fragment: &FragmentHeader) -> Verdict {
        let first = fragment.first_command;
        let request = fragment.request.0;
        // The client's requests it still waits for before this one, from the oldest.
        let waits_for = fragment.oldest_pending.0.min(request)..request;
        let Some(session) = self.sessions.get(&fragment.client.0) else {
            return match (request, first) {
                (1, 0) => Verdict::Apply {
                    from: 0,
                    fresh: true,
                },
                _ if !waits_for.is_empty() => Verdict::NotYet,
                _ => Verdict::Expired,
            };
        };
        if request > session.request && first == 0 {
            // Each request it waits for must have run whole: the session's latest is the
            // one just before it, finished, or it waits for none.
            let finished = session.applied.len() as u32 == session.commands;
            let ran = waits_for.is_empty() || (session.request + 1 == request && finished);
            return if ran {
                Verdict::Apply {
                    from: 0,
                    fresh: true,
                }
            } else {
                Verdict::NotYet
            };
        }
        // A later part of a newer request that waits for others: its start did not run.
        if request > session.request && !waits_for.is_empty() {
            return Verdict::NotYet;
        }
        if let Some((_, digest, _)) = session.earlier.iter().find(|(r, _, _)| *r == request) {
            return if *digest == fragment.digest {
                Verdict::Earlier
            } else {
                Verdict::Reused
            };
        }
        if request == session.request && fragment.digest != session.digest {
            return Verdict::Reused;
        }
        let applied = session.applied.len() as u32;
        let continues = request == session.request
            && fragment.request_commands == session.commands
            && first <= applied;
        if continues {
            Verdict::Apply {
                from: applied,
                fresh: false,
            }
        } else {
            Verdict::Stale
        }
    }

    /// Opens the session of the request that `fragment` starts: the client's finished
    /// requests it still waits on stay answerable as the engine keeps them.
    fn open_session(&mut self, fragment: &FragmentHeader) {
        let mut earlier = Vec::new();
        if let Some(old) = self.sessions.remove(&fragment.client.0) {
            earlier = old.earlier;
            if old.applied.len() as u32 == old.commands {
                earlier.push((old.request, old.digest, old.applied));
            }
            let excess = earlier.len().saturating_sub(PIPELINE_REQUESTS_MAX - 1);
            earlier.drain(..excess);
            let oldest = fragment.oldest_pending.min(fragment.request).0;
            earlier.retain(|(request, _, _)| *request >= oldest);
        }
        let session = ModelSession {
            request: fragment.request.0,
            commands: fragment.request_commands,
            digest: fragment.digest,
            applied: Vec::new(),
            earlier,
        };
        self.sessions.insert(fragment.client.0, session);
    }

    /// Applies the fragment's commands from position `from` of its request on: each outside
    /// the keyed runs on the accounts, each run's part as its key's session decides.
    fn apply(&mut self, logged: &Logged<'_, bank::Bank>, from: u32) {
        let fragment = &logged.fragment;
        let first = fragment.first_command;
        let end = first + fragment.command_count;
        let mut position = from.max(first);
        while position < end {
            let at = (position - first) as usize;
            let covering = logged
                .runs
                .iter()
                .find(|keyed| keyed.run.first <= position && position < keyed.run.end());
            let (part_end, got) = match covering {
                Some(keyed) => {
                    let part_end = keyed.run.end().min(end);
                    let part = &logged.commands[at..(part_end - first) as usize];
                    (
                        part_end,
                        self.keyed_part(logged.index.0, keyed, position, part),
                    )
                }
                None => {
                    let origin = Origin {
                        index: logged.index.0,
                        client: fragment.client.0,
                        request: fragment.request.0,
                        command: position,
                    };
                    let outcome = self.run_one(&logged.commands[at], origin);
                    (position + 1, vec![KeyedOutcome::Ran(outcome)])
                }
            };
            let commands = logged.commands[at..(part_end - first) as usize].iter();
            if let Some(session) = self.sessions.get_mut(&fragment.client.0) {
                session.applied.extend(commands.cloned().zip(got));
            }
            position = part_end;
        }
    }

    /// What the commands `part` of keyed run `keyed`, from request position `start` on, get:
    /// decided as request 1 of the key's session would be (of the run's commands, with the
    /// run's digest, from the part's place in the run), they apply when that applies them;
    /// each gets the outcome its key's session holds, or why it did not run.
    fn keyed_part(
        &mut self,
        index: u64,
        keyed: &KeyedRun,
        start: u32,
        part: &[BankCommand],
    ) -> Vec<Got> {
        let run = keyed.run;
        let header = FragmentHeader {
            client: run.key,
            request: RequestNumber(1),
            oldest_pending: RequestNumber(1),
            request_commands: run.count,
            first_command: start - run.first,
            command_count: part.len() as u32,
            command_bytes: 0,
            digest: keyed.digest,
        };
        match self.verdict(&header) {
            Verdict::Apply { from, fresh } => {
                if fresh {
                    self.open_session(&header);
                }
                self.run_key(index, &header, part, from);
                let held = &self.sessions[&run.key.0].applied;
                let held = held.iter().skip(header.first_command as usize);
                held.take(part.len()).map(|(_, got)| got.clone()).collect()
            }
            Verdict::Expired => vec![KeyedOutcome::Expired; part.len()],
            // A key's session only ever has request 1, run at once: a session of the same id
            // past it, or not yet at it, is another's.
            Verdict::Reused | Verdict::Stale | Verdict::NotYet | Verdict::Earlier => {
                vec![KeyedOutcome::Reused; part.len()]
            }
        }
    }

    /// Runs the commands `part` of the key's request 1 that `header` describes, from position
    /// `from` of it on, keeping each outcome in the key's session.
    fn run_key(&mut self, index: u64, header: &FragmentHeader, part: &[BankCommand], from: u32) {
        for (position, command) in (header.first_command..).zip(part) {
            if position < from {
                continue;
            }
            let origin = Origin {
                index,
                client: header.client.0,
                request: header.request.0,
                command: position,
            };
            let outcome = self.run_one(command, origin);
            if let Some(session) = self.sessions.get_mut(&header.client.0) {
                session
                    .applied
                    .push((command.clone(), KeyedOutcome::Ran(outcome)));
            }
        }
    }

    /// One command on the model's accounts, as an outcome.
    fn run_one(&mut self, command: &BankCommand, at: Origin) -> BankOutcome {
        match self.run(command, at) {
            Ok(output) => Outcome::Done(output),
            Err(error) => Outcome::Failed(error),
        }
    }

    /// The answer the model gives a fragment that ends its request.
    fn expected(&self, fragment: &FragmentHeader, verdict: Verdict) -> Expected<'_> {
        match verdict {
            Verdict::Stale => Expected::Stale,
            Verdict::Expired => Expected::Expired,
            Verdict::Reused => Expected::Reused,
            Verdict::NotYet => Expected::NotYet,
            Verdict::Earlier => self
                .sessions
                .get(&fragment.client.0)
                .and_then(|s| s.earlier.iter().find(|(r, _, _)| *r == fragment.request.0))
                .map_or(Expected::Results(&[]), |(_, _, applied)| {
                    Expected::Results(applied)
                }),
            Verdict::Apply { .. } => self
                .sessions
                .get(&fragment.client.0)
                .map_or(Expected::Results(&[]), |s| Expected::Results(&s.applied)),
        }
    }

    /// Compares the model's accounts with the `ACCOUNTS` table of a committed state.
    pub fn check_state(&self, state: &State) -> Result<(), OracleError> {
        for (id, account) in state.iter_unordered(&ACCOUNTS) {
            let Some(model) = self.accounts.get(&id.0) else {
                return Err(OracleError::NotInModel {
                    id: id.0,
                    account: *account,
                });
            };
            if model.public() != *account {
                return Err(OracleError::OtherAccount {
                    id: id.0,
                    state: *account,
                    model: model.public(),
                    changed_by: model.changed_by,
                });
            }
        }
        let missing = self
            .accounts
            .iter()
            .find(|(id, _)| state.get(&ACCOUNTS, &AccountId(**id)).is_none());
        match missing {
            Some((id, model)) => Err(OracleError::NotInState {
                id: *id,
                changed_by: model.changed_by,
            }),
            None => Ok(()),
        }
    }

    /// One Bank command on the model's accounts.
    fn run(&mut self, command: &BankCommand, at: Origin) -> Result<BankOutput, BankError> {
        match *command {
            BankCommand::Open { id, balance, flags } => self.open(id, balance, flags, at),
            BankCommand::Deposit { id, amount } => {
                let account = self.existing(id)?;
                positive(amount)?;
                let balance = account
                    .balance
                    .checked_add(amount)
                    .ok_or(BankError::Overflow)?;
                Ok(BankOutput::Account(self.change(id, account, balance, at)))
            }
            BankCommand::Withdraw { id, amount } => {
                let account = self.existing(id)?;
                positive(amount)?;
                let balance = take(account.balance, amount)?;
                Ok(BankOutput::Account(self.change(id, account, balance, at)))
            }
            BankCommand::Transfer { from, to, amount } => self.transfer(from, to, amount, at),
            BankCommand::Get { id } => Ok(BankOutput::Account(self.existing(id)?.public())),
            BankCommand::Audit => Ok(BankOutput::Audit {
                accounts: self.accounts.len() as u64,
                total: self.accounts.values().map(|a| u128::from(a.balance)).sum(),
            }),
        }
    }

    fn open(
        &mut self,
        id: AccountId,
        balance: u64,
        flags: u32,
        at: Origin,
    ) -> Result<BankOutput, BankError> {
        if id.0 == 0 {
            return Err(BankError::InvalidId);
        }
        if self.accounts.contains_key(&id.0) {
            return Err(BankError::AccountExists(id));
        }
        let account = ModelAccount {
            balance,
            version: 1,
            flags,
            changed_by: at,
        };
        self.accounts.insert(id.0, account);
        Ok(BankOutput::Account(account.public()))
    }

    fn transfer(
        &mut self,
        from: AccountId,
        to: AccountId,
        amount: u64,
        at: Origin,
    ) -> Result<BankOutput, BankError> {
        if from == to {
            return Err(BankError::SameAccount);
        }
        let debited = self.existing(from)?;
        let credited = self.existing(to)?;
        positive(amount)?;
        let from_balance = take(debited.balance, amount)?;
        let to_balance = credited
            .balance
            .checked_add(amount)
            .ok_or(BankError::Overflow)?;
        self.change(from, debited, from_balance, at);
        self.change(to, credited, to_balance, at);
        Ok(BankOutput::Transferred {
            from_balance,
            to_balance,
        })
    }

    /// The open account `id`.
    fn existing(&self, id: AccountId) -> Result<ModelAccount, BankError> {
        if id.0 == 0 {
            return Err(BankError::InvalidId);
        }
        self.accounts
            .get(&id.0)
            .copied()
            .ok_or(BankError::AccountNotFound(id))
    }

    /// Stores `account` as `id` with a new balance and one more version; returns it.
    fn change(
        &mut self,
        id: AccountId,
        mut account: ModelAccount,
        balance: u64,
        at: Origin,
    ) -> Account {
        account.balance = balance;
        account.version += 1;
        account.changed_by = at;
        self.accounts.insert(id.0, account);
        account.public()
    }
}

/// Refuses an amount of zero.
fn positive(amount: u64) -> Result<(), BankError> {
    if amount == 0 {
        Err(BankError::ZeroAmount)
    } else {
        Ok(())
    }
}

/// `balance` less `amount`, or why not.
fn take(balance: u64, amount: u64) -> Result<u64, BankError> {
    balance
        .checked_sub(amount)
        .ok_or(BankError::InsufficientFunds { balance, amount })
}

/// Compares the reference's answer to a request with the model's.
fn compare(
    at: RequestAt,
    expected: &Expected<'_>,
    answer: &Answer<bank::Bank>,
) -> Result<(), OracleError> {
    match (expected, answer) {
        (Expected::Stale, Answer::Stale)
        | (Expected::Expired, Answer::Expired)
        | (Expected::Reused, Answer::Reused)
        | (Expected::NotYet, Answer::NotYet) => Ok(()),
        (Expected::Results(model), Answer::Results(reference)) => {
            let ran: Vec<Got> = reference.iter().cloned().map(KeyedOutcome::Ran).collect();
            compare_results(at, model, &ran)
        }
        (Expected::Results(model), Answer::Keyed(reference)) => {
            compare_results(at, model, reference)
        }
        (
            Expected::Results(_)
            | Expected::Stale
            | Expected::Expired
            | Expected::Reused
            | Expected::NotYet,
            Answer::Results(_)
            | Answer::Keyed(_)
            | Answer::Stale
            | Answer::Expired
            | Answer::Reused
            | Answer::NotYet
            | Answer::Undecodable,
        ) => Err(OracleError::OtherAnswer {
            at,
            answer: format!("{answer:?}"),
            expected: format!("{expected:?}"),
        }),
    }
}

/// Compares the reference's outcomes of a request (each plain one as `Ran`) with the model's.
fn compare_results(
    at: RequestAt,
    model: &[(BankCommand, Got)],
    reference: &[Got],
) -> Result<(), OracleError> {
    if model.len() != reference.len() {
        return Err(OracleError::OutcomeCount {
            at,
            reference: reference.len(),
            model: model.len(),
        });
    }
    let wrong = model
        .iter()
        .zip(reference)
        .position(|((_, model), reference)| model != reference);
    match wrong {
        Some(k) => Err(OracleError::OtherOutcome {
            at,
            position: k,
            differs: Box::new((model[k].0.clone(), reference[k].clone(), model[k].1.clone())),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bank::Bank;
    use engine::Sandbox;
    use engine::ids::{ClientId, EntryIndex, RequestNumber};

    /// Room for the tests' few accounts.
    const TEST_STATE_BYTES: u64 = 1 << 20;

    const A: AccountId = AccountId(7);
    const B: AccountId = AccountId(9);

    /// Commands `first..first + count` of a request of `total` from `client`.
    fn fragment(client: u128, request: u64, total: u32, first: u32, count: u32) -> FragmentHeader {
        FragmentHeader {
            client: ClientId(client),
            request: RequestNumber(request),
            oldest_pending: RequestNumber(request),
            request_commands: total,
            first_command: first,
            command_count: count,
            command_bytes: 0,
            digest: RequestDigest::of(total, &request.to_le_bytes()),
        }
    }

    /// Feeds the oracle one fragment logged in entry `index`.
    fn feed(
        oracle: &mut BankOracle,
        index: u64,
        fragment: FragmentHeader,
        commands: &[BankCommand],
        answer: Option<Answer<Bank>>,
    ) -> Result<(), String> {
        let logged = Logged {
            index: EntryIndex(index),
            fragment,
            commands,
            runs: &[],
            answer,
        };
        oracle.logged(logged).map_err(|error| error.to_string())
    }

    fn account(balance: u64, version: u64) -> BankOutcome {
        Outcome::Done(BankOutput::Account(Account {
            balance,
            version,
            flags: 0,
        }))
    }

    fn open(id: AccountId, balance: u64) -> BankCommand {
        BankCommand::Open {
            id,
            balance,
            flags: 0,
        }
    }

    /// An oracle where client 1's requests 1 and 2 opened A with 100 and B with 0.
    fn two_accounts() -> BankOracle {
        let mut oracle = BankOracle::default();
        for (n, (id, balance)) in [(A, 100), (B, 0)].into_iter().enumerate() {
            let n = n as u64 + 1;
            let answer = Answer::Results(vec![account(balance, 1)]);
            feed(
                &mut oracle,
                n,
                fragment(1, n, 1, 0, 1),
                &[open(id, balance)],
                Some(answer),
            )
            .expect("correct answers to opens pass");
        }
        oracle
    }

    /// Proves a wrong answer is a violation naming the entry, client, request and command: a
    /// transfer the reference reports done when the model finds the funds insufficient.
    #[test]
    fn a_wrong_answer_is_a_violation() {
        let mut oracle = two_accounts();
        let transfer = BankCommand::Transfer {
            from: A,
            to: B,
            amount: 500,
        };
        let wrong = Answer::Results(vec![Outcome::Done(BankOutput::Transferred {
            from_balance: 0,
            to_balance: 500,
        })]);
        let found = feed(
            &mut oracle,
            3,
            fragment(1, 3, 1, 0, 1),
            &[transfer],
            Some(wrong),
        )
        .expect_err("a wrong answer is a violation");
        assert!(
            found.contains("entry 3: client 1 request 3 command 0 (Transfer"),
            "{found}"
        );
        assert!(found.contains("InsufficientFunds"), "{found}");
    }

    /// Proves a retried request logged twice must get its first results again, and that an
    /// answer or a committed state showing it applied twice is a violation.
    #[test]
    fn a_duplicate_applied_twice_is_a_violation() {
        let mut oracle = two_accounts();
        let deposit = BankCommand::Deposit { id: A, amount: 50 };
        let first = Answer::Results(vec![account(150, 2)]);
        feed(
            &mut oracle,
            3,
            fragment(1, 3, 1, 0, 1),
            std::slice::from_ref(&deposit),
            Some(first),
        )
        .expect("the first copy applies");
        let twice = Answer::Results(vec![account(200, 3)]);
        let found = feed(
            &mut oracle,
            4,
            fragment(1, 3, 1, 0, 1),
            std::slice::from_ref(&deposit),
            Some(twice),
        )
        .expect_err("a second execution is a violation");
        assert!(
            found.contains("entry 4: client 1 request 3 command 0 (Deposit"),
            "{found}"
        );
        let mut sandbox = Sandbox::new(Bank, TEST_STATE_BYTES);
        for commands in [vec![open(A, 100)], vec![open(B, 0)], vec![deposit.clone()]] {
            sandbox.run(&commands).expect("the sandbox applies");
        }
        oracle
            .check_state(sandbox.state())
            .expect("the state with the deposit once matches");
        sandbox.run(&[deposit]).expect("the sandbox applies");
        let found = oracle
            .check_state(sandbox.state())
            .expect_err("a state with the deposit twice is a violation")
            .to_string();
        assert!(found.contains(&format!("account {}", A.0)), "{found}");
        assert!(
            found.contains("entry 3: client 1 request 3 command 0"),
            "{found}"
        );
    }

    /// Proves a duplicate answered with the first copy's results passes and changes nothing.
    #[test]
    fn a_duplicate_answered_as_the_first_passes() {
        let mut oracle = two_accounts();
        let deposit = [BankCommand::Deposit { id: A, amount: 50 }];
        for index in [3, 4] {
            let answer = Answer::Results(vec![account(150, 2)]);
            feed(
                &mut oracle,
                index,
                fragment(1, 3, 1, 0, 1),
                &deposit,
                Some(answer),
            )
            .expect("both copies get the first results");
        }
        let audit = Answer::Results(vec![Outcome::Done(BankOutput::Audit {
            accounts: 2,
            total: 150,
        })]);
        feed(
            &mut oracle,
            5,
            fragment(1, 4, 1, 0, 1),
            &[BankCommand::Audit],
            Some(audit),
        )
        .expect("the audit counts the deposit once");
    }

    /// Proves each command of a request split between entries applies once when a retry
    /// overlaps it, and that stale and expired copies apply nothing and are answered so.
    #[test]
    fn split_and_retried_requests_apply_each_command_once() {
        let mut oracle = two_accounts();
        let deposits: Vec<BankCommand> = (1..=3)
            .map(|amount| BankCommand::Deposit { id: A, amount })
            .collect();
        let results = || Answer::Results(vec![account(101, 2), account(103, 3), account(106, 4)]);
        feed(
            &mut oracle,
            3,
            fragment(1, 3, 3, 0, 2),
            &deposits[..2],
            None,
        )
        .expect("a first fragment has no answer");
        feed(
            &mut oracle,
            4,
            fragment(1, 3, 3, 0, 3),
            &deposits,
            Some(results()),
        )
        .expect("the retry runs only the command not yet applied");
        feed(
            &mut oracle,
            5,
            fragment(1, 3, 3, 2, 1),
            &deposits[2..],
            Some(results()),
        )
        .expect("the first attempt's last fragment is a duplicate");
        let get = [BankCommand::Get { id: A }];
        feed(
            &mut oracle,
            6,
            fragment(1, 2, 1, 0, 1),
            &[open(B, 0)],
            Some(Answer::Stale),
        )
        .expect("an older request is stale");
        let found = feed(
            &mut oracle,
            7,
            fragment(2, 2, 1, 0, 1),
            &get,
            Some(Answer::Results(vec![account(106, 4)])),
        )
        .expect_err("a new client's request 2 is expired, not run");
        assert!(found.contains("Expired"), "{found}");
        feed(
            &mut oracle,
            8,
            fragment(1, 4, 1, 0, 1),
            &get,
            Some(Answer::Results(vec![account(106, 4)])),
        )
        .expect("A holds each deposit once");
    }

    /// Key 50's session, and its run of the one command at `first` of a request.
    fn keyed(first: u32, digest: &[u8]) -> KeyedRun {
        KeyedRun {
            fragment: 0,
            run: engine::internals::entry::KeyRun {
                key: ClientId(50),
                first,
                count: 1,
            },
            digest: RequestDigest::of(1, digest),
        }
    }

    /// Feeds the oracle a whole request of `client` (number `request`), one keyed run in it.
    fn feed_keyed(
        oracle: &mut BankOracle,
        (index, client, request): (u64, u128, u64),
        commands: &[BankCommand],
        run: KeyedRun,
        answer: Vec<Got>,
    ) -> Result<(), String> {
        let count = commands.len() as u32;
        let logged = Logged {
            index: EntryIndex(index),
            fragment: fragment(client, request, count, 0, count),
            commands,
            runs: &[run],
            answer: Some(Answer::Keyed(answer)),
        };
        oracle.logged(logged).map_err(|error| error.to_string())
    }

    /// Proves a key applies once whichever request, client or session carries it: a copy
    /// with the same commands is answered the first one's outcome and changes nothing, one
    /// with other commands is answered reused and runs nothing, the key sent alone is the
    /// same key; and an answer showing the key run twice is a violation.
    #[test]
    fn a_key_applied_twice_is_a_violation() {
        use KeyedOutcome::{Ran, Reused};
        let mut oracle = two_accounts();
        let deposit = BankCommand::Deposit { id: A, amount: 50 };
        let get_a = BankCommand::Get { id: A };
        let first = [deposit.clone(), BankCommand::Get { id: B }];
        let answer = vec![Ran(account(150, 2)), Ran(account(0, 1))];
        feed_keyed(&mut oracle, (3, 1, 3), &first, keyed(0, b"d"), answer)
            .expect("the key's first use runs it");
        let again = [get_a.clone(), deposit.clone()];
        let answer = vec![Ran(account(150, 2)), Ran(account(150, 2))];
        feed_keyed(&mut oracle, (4, 2, 1), &again, keyed(1, b"d"), answer)
            .expect("another client's copy is answered the first outcome, run once");
        let other = [BankCommand::Withdraw { id: A, amount: 10 }];
        feed_keyed(&mut oracle, (5, 3, 1), &other, keyed(0, b"w"), vec![Reused])
            .expect("the key with other commands runs nothing");
        let mut alone = fragment(50, 1, 1, 0, 1);
        alone.digest = RequestDigest::of(1, b"d");
        let answer = Answer::Results(vec![account(150, 2)]);
        feed(
            &mut oracle,
            6,
            alone,
            std::slice::from_ref(&deposit),
            Some(answer),
        )
        .expect("the key sent alone is the same key");
        let mut sandbox = Sandbox::new(Bank, TEST_STATE_BYTES);
        for commands in [vec![open(A, 100)], vec![open(B, 0)], vec![deposit.clone()]] {
            sandbox.run(&commands).expect("the sandbox applies");
        }
        oracle
            .check_state(sandbox.state())
            .expect("the state with the key run once matches");
        let twice = vec![Ran(account(200, 3))];
        let found = feed_keyed(&mut oracle, (7, 4, 1), &[deposit], keyed(0, b"d"), twice)
            .expect_err("a key run twice is a violation");
        assert!(
            found.contains("entry 7: client 4 request 1 command 0 (Deposit"),
            "{found}"
        );
        let found = feed_keyed(
            &mut oracle,
            (8, 5, 1),
            &[get_a],
            keyed(0, b"d"),
            vec![Reused],
        )
        .expect_err("a key answered reused for its own commands is a violation");
        assert!(found.contains("command 0"), "{found}");
    }
}
