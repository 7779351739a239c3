//! The independent oracle of `runner sim`: a plain Bank over a `BTreeMap`, with client
//! sessions of its own, written by hand from the Bank's rules (`bank/src/lib.rs`) and the
//! exactly-once rules the engine documents (`engine::ReplyStatus`, the decisions of
//! `engine::apply::Sessions`). It shares no code with the engine's apply, sessions or codec,
//! nor with the Bank's `execute`. The simulator's checker feeds it every request fragment
//! the committed log holds, duplicates included, with the reference replica's answer; the
//! oracle says where the two differ, and where the committed state differs from its accounts.
//!
//! Not modeled, so either would show as a violation: session eviction (the simulator's few
//! clients stay far below `engine::apply::SESSIONS_MAX`) and a full state
//! (`BankError::CapacityExhausted`: the simulated state holds thousands of times the accounts
//! the clients use).

use bank::{ACCOUNTS, Account, AccountId, BankCommand, BankError, BankOutput};
use engine::Outcome;
use engine::apply::PIPELINE_REQUESTS_MAX;
use engine::internals::entry::{FragmentHeader, RequestDigest};
use engine::sim::check::{Answer, Logged};
use engine::state::State;
use std::collections::BTreeMap;
use std::fmt;

/// A Bank command's outcome.
pub type BankOutcome = Outcome<BankOutput, BankError>;

/// Where a command stands in the committed log, for a violation's message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Origin {
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

/// A request's commands applied so far, with their outcomes, in order.
type Applied = Vec<(BankCommand, BankOutcome)>;

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
    /// The request's commands with their outcomes, in order.
    Results(&'a [(BankCommand, BankOutcome)]),
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
    pub fn logged(&mut self, logged: Logged<'_, bank::Bank>) -> Result<(), String> {
        let fragment = logged.fragment;
        let verdict = self.verdict(&fragment);
        if let Verdict::Apply { from, fresh } = verdict {
            self.apply(&logged, from, fresh);
        }
        let name = format!(
            "entry {}: client {} request {}",
            logged.index.0, fragment.client.0, fragment.request.0
        );
        let expected = fragment
            .is_last()
            .then(|| self.expected(&fragment, verdict));
        match (expected, &logged.answer) {
            (None, None) => Ok(()),
            (Some(expected), Some(answer)) => compare(&name, &expected, answer),
            (None, Some(answer)) => Err(format!(
                "{name}: the reference answered {answer:?} before its last fragment"
            )),
            (Some(expected), None) => Err(format!(
                "{name}: the reference did not answer; the model says {expected:?}"
            )),
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

    /// Applies the fragment's commands from position `from` of its request on.
    fn apply(&mut self, logged: &Logged<'_, bank::Bank>, from: u32, fresh: bool) {
        let fragment = &logged.fragment;
        if fresh {
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
        let first = fragment.first_command;
        for (position, command) in (first..).zip(logged.commands) {
            if position < from {
                continue;
            }
            let origin = Origin {
                index: logged.index.0,
                client: fragment.client.0,
                request: fragment.request.0,
                command: position,
            };
            let outcome = match self.run(command, origin) {
                Ok(output) => Outcome::Done(output),
                Err(error) => Outcome::Failed(error),
            };
            if let Some(session) = self.sessions.get_mut(&fragment.client.0) {
                session.applied.push((command.clone(), outcome));
            }
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
    pub fn check_state(&self, state: &State) -> Result<(), String> {
        for (id, account) in state.iter_unordered(&ACCOUNTS) {
            let Some(model) = self.accounts.get(&id.0) else {
                return Err(format!(
                    "account {} is in the state ({account:?}) but not in the model",
                    id.0
                ));
            };
            if model.public() != *account {
                return Err(format!(
                    "account {}: the state has {account:?}, the model {:?} (last changed at {})",
                    id.0,
                    model.public(),
                    model.changed_by
                ));
            }
        }
        let missing = self
            .accounts
            .iter()
            .find(|(id, _)| state.get(&ACCOUNTS, &AccountId(**id)).is_none());
        match missing {
            Some((id, model)) => Err(format!(
                "account {id} is in the model (opened or changed at {}) but not in the state",
                model.changed_by
            )),
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
fn compare(name: &str, expected: &Expected<'_>, answer: &Answer<bank::Bank>) -> Result<(), String> {
    match (expected, answer) {
        (Expected::Stale, Answer::Stale)
        | (Expected::Expired, Answer::Expired)
        | (Expected::Reused, Answer::Reused)
        | (Expected::NotYet, Answer::NotYet) => Ok(()),
        (Expected::Results(model), Answer::Results(reference)) => {
            if model.len() != reference.len() {
                return Err(format!(
                    "{name}: the reference has {} outcomes, the model {}",
                    reference.len(),
                    model.len()
                ));
            }
            let wrong = model
                .iter()
                .zip(reference)
                .position(|((_, model), reference)| model != reference);
            match wrong {
                Some(k) => Err(format!(
                    "{name} command {k} ({:?}): the reference says {:?}, the model {:?}",
                    model[k].0, reference[k], model[k].1
                )),
                None => Ok(()),
            }
        }
        (
            Expected::Results(_)
            | Expected::Stale
            | Expected::Expired
            | Expected::Reused
            | Expected::NotYet,
            Answer::Results(_)
            | Answer::Stale
            | Answer::Expired
            | Answer::Reused
            | Answer::NotYet
            | Answer::Undecodable,
        ) => Err(format!(
            "{name}: the reference answered {answer:?}, the model says {expected:?}"
        )),
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
        oracle.logged(Logged {
            index: EntryIndex(index),
            fragment,
            commands,
            answer,
        })
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
            .expect_err("a state with the deposit twice is a violation");
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
}
