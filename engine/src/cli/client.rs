//! `client`: commands read as JSON, sent as requests, outcomes printed as JSON: a handler's
//! commands scripted from a shell, with no client code of the author's. A command the
//! handler refused makes the exit code 1 (unless `--allow-refused`); no answer within
//! `--timeout`, 2.

use super::gateway::json::{self, Wide};
use super::{CliHandler, Output, runtime};
use crate::apply::KeyedOutcome;
use crate::client::{Client, ClientConfig, ClientError};
use crate::handler::Outcome;
use crate::ids::ClientId;
use anyhow::Context;
use clap::Args;
use serde_json::{Value, json};
use std::io::BufRead;
use std::path::PathBuf;
use std::time::Duration;

/// Seconds `client` keeps trying a request by default before it gives up (`--timeout`).
pub const CLIENT_GIVE_UP_SECS_DEFAULT: f64 = 30.0;

/// A command the handler refused (an outcome `failed` or `invalid`), or several.
#[derive(Debug, thiserror::Error)]
#[error(
    "{refused} of {commands} commands refused (the outcomes are printed; --allow-refused \
         exits 0 for them)"
)]
pub struct Refused {
    /// Commands refused.
    pub refused: usize,
    /// Commands sent.
    pub commands: usize,
}

/// Options of `client`.
#[derive(Args, Debug)]
pub struct ClientArgs {
    /// The cluster file, or a client file (`client-file` writes one).
    #[arg(long, env = crate::cli::CLUSTER_FILE_ENV, visible_alias = "client-file")]
    pub cluster: PathBuf,
    /// The commands of one request, each as JSON (`'{"Deposit": {"id": 7, "amount": 5}}'`, as
    /// serde spells the handler's command type). Without any, standard input is read: one
    /// request per line, a command or a JSON array of commands.
    pub commands: Vec<String>,
    /// Seconds to keep trying a request before giving up (its outcome is then unknown: exit
    /// 2, unreachable).
    #[arg(long, alias = "give-up-after", value_name = "SECS",
          value_parser = super::status::timeout_seconds, default_value_t = CLIENT_GIVE_UP_SECS_DEFAULT)]
    pub timeout: f64,
    /// Exit 0 (success) even when the handler refused a command (the outcomes say so);
    /// without it, a refused command makes it exit 1 (negative).
    #[arg(long)]
    pub allow_refused: bool,
    /// What standard output holds for each request: `json` (the default: one JSON array of
    /// its outcomes, on one line) or `table` (one line per outcome, for a person).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Output::Json)]
    pub output: Output,
    /// Send as this client id (decimal, or hexadecimal after `0x`; up to 128 bits) instead of
    /// a fresh random one: the session goes on where the cluster left it (its next request
    /// number asked of the leader), so one id's requests across runs are one history. An id
    /// whose session expired is refused (exit 4, refused).
    #[arg(long, value_name = "ID", value_parser = client_id)]
    pub client_id: Option<ClientId>,
    /// Send the commands under this key (an order number, a payment id): the cluster runs
    /// them once for the key, whoever sends it and however often, and answers the same key
    /// with the same commands again with the outcomes they had. The same key with other
    /// commands, or one the cluster no longer keeps, runs nothing (exit 4, refused).
    #[arg(
        long,
        value_name = "KEY",
        value_parser = key,
        requires = "commands",
        conflicts_with = "client_id"
    )]
    pub key: Option<String>,
}

/// Why commands sent under a key did not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyRefused {
    /// The key was used before with other commands.
    #[error("the key {key:?} was used before with other commands; these did not run")]
    Reused {
        /// The key.
        key: String,
    },
    /// The cluster no longer keeps the key.
    #[error(
        "the cluster no longer keeps the key {key:?}: the commands did not run now, and \
         whether they ran before is not known"
    )]
    Expired {
        /// The key.
        key: String,
    },
}

/// Sends `commands` as one request under the caller's `key`
/// ([`crate::client::key_session`]), on a session of its own: run once per key. Gives up
/// as [`within`] does, after the config's `give_up_after`.
pub async fn submit_keyed<H: crate::handler::Handler>(
    config: ClientConfig,
    key: &str,
    commands: &[H::Command],
) -> anyhow::Result<Vec<crate::handler::OutcomeOf<H>>> {
    let timeout = config
        .give_up_after
        .unwrap_or(Duration::from_secs_f64(CLIENT_GIVE_UP_SECS_DEFAULT));
    let id = ClientId::random().map_err(ClientError::NoRandomness)?;
    let mut client = Client::new(config, id, crate::ids::RequestNumber(1));
    let run = net::message::KeyRun {
        key: crate::client::key_session(key),
        first: 0,
        count: commands.len() as u32,
    };
    let outcomes = within(timeout, client.submit_keyed::<H>(commands, vec![run])).await?;
    let key = key.to_owned();
    (outcomes.into_iter())
        .map(|outcome| match outcome {
            KeyedOutcome::Ran(outcome) => Ok(outcome),
            KeyedOutcome::Reused => Err(KeyRefused::Reused { key: key.clone() }.into()),
            KeyedOutcome::Expired => Err(KeyRefused::Expired { key: key.clone() }.into()),
        })
        .collect()
}

/// Why a text is not a `--key`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// Empty, too long, or with a character that is not visible ASCII.
    #[error(
        "a key is 1 to {} visible ASCII characters, as an Idempotency-Key is",
        super::gateway::IDEMPOTENCY_KEY_CHARS_MAX
    )]
    NotAKey,
}

/// `--key`'s value: a key as the gateway's Idempotency-Key takes it.
pub fn key(text: &str) -> Result<String, KeyError> {
    match super::gateway::is_key(text.as_bytes()) {
        true => Ok(text.to_owned()),
        false => Err(KeyError::NotAKey),
    }
}

/// Why a text is not a `--client-id`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientIdError {
    /// Not a number in decimal or `0x` hexadecimal, or one over 128 bits.
    #[error("{0}: a client id is a number of up to 128 bits")]
    NotANumber(std::num::ParseIntError),
}

/// `--client-id`'s value: a 128-bit id in decimal or `0x` hexadecimal.
pub fn client_id(text: &str) -> Result<ClientId, ClientIdError> {
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u128::from_str_radix(hex, 16),
        None => text.parse::<u128>(),
    };
    parsed.map(ClientId).map_err(ClientIdError::NotANumber)
}

/// Sends the commands; prints each request's outcomes as one JSON array per line; fails
/// (exit 1) when the handler refused any, unless `--allow-refused`.
pub fn client<H: CliHandler>(args: ClientArgs) -> anyhow::Result<()> {
    let mut config = super::read_client_file(&args.cluster)?.client_config()?;
    let timeout = Duration::from_secs_f64(args.timeout);
    config.give_up_after = Some(timeout);
    let runtime = runtime()?;
    if let Some(key) = &args.key {
        let commands = args.commands.iter().map(|text| parse::<H>(text));
        let commands = commands.collect::<anyhow::Result<Vec<_>>>()?;
        let outcomes = runtime.block_on(submit_keyed::<H>(config, key, &commands))?;
        print_outcomes::<H>(&outcomes, args.output)?;
        let refused = outcomes.iter().filter(|o| is_refused(o)).count();
        return refused_or_fine(refused, outcomes.len(), args.allow_refused);
    }
    let mut client = runtime.block_on(within(timeout, session(config, args.client_id)))?;
    let (mut refused, mut sent) = (0, 0);
    let mut send = |commands: Vec<H::Command>| -> anyhow::Result<()> {
        let outcomes = runtime.block_on(within(timeout, client.submit::<H>(&commands)))?;
        print_outcomes::<H>(&outcomes, args.output)?;
        sent += outcomes.len();
        refused += outcomes.iter().filter(|o| is_refused(o)).count();
        Ok(())
    };
    if !args.commands.is_empty() {
        let commands = args.commands.iter().map(|text| parse::<H>(text));
        send(commands.collect::<anyhow::Result<_>>()?)?;
    } else {
        for (number, line) in std::io::stdin().lock().lines().enumerate() {
            let line = line.context("reading standard input")?;
            if line.trim().is_empty() {
                continue;
            }
            let commands =
                parse_line::<H>(&line).with_context(|| format!("line {}", number + 1))?;
            send(commands)?;
        }
    }
    refused_or_fine(refused, sent, args.allow_refused)
}

/// Success, or [`Refused`] when the handler refused a command and that is not allowed.
fn refused_or_fine(refused: usize, commands: usize, allowed: bool) -> anyhow::Result<()> {
    match (refused, allowed) {
        (0, _) | (_, true) => Ok(()),
        (_, false) => Err(Refused { refused, commands }.into()),
    }
}

/// The session a `client` command sends in: a fresh id, registered through the log (its
/// requests numbered from 1), or the given id, going on from its session's last request.
pub async fn session(config: ClientConfig, id: Option<ClientId>) -> Result<Client, ClientError> {
    let client = match id {
        None => Client::register(config).await?,
        Some(id) => Client::resume(config, id).await?,
    };
    tracing::debug!(
        client = %client.id(),
        next_request = client.next_request().0,
        "client session"
    );
    Ok(client)
}

/// `work`, or [`ClientError::GaveUp`] when it takes longer than `timeout` and a little: the
/// client gives up on its own at `timeout`; this bounds a connection that hangs as well.
pub async fn within<T>(
    timeout: Duration,
    work: impl std::future::Future<Output = Result<T, ClientError>>,
) -> Result<T, ClientError> {
    let bound = timeout + Duration::from_millis(CLIENT_TIMEOUT_GRACE_MS);
    match tokio::time::timeout(bound, work).await {
        Ok(result) => result,
        Err(_) => Err(ClientError::GaveUp {
            attempts: 0,
            seconds: bound.as_secs_f64(),
            last_rejection: None,
        }),
    }
}

/// Time past `--timeout` that `client` waits for the client library to give up on its own,
/// in milliseconds.
pub const CLIENT_TIMEOUT_GRACE_MS: u64 = 500;

/// True for an outcome the handler refused (`failed`) or could not take (`invalid`).
pub fn is_refused<O, E>(outcome: &Outcome<O, E>) -> bool {
    match outcome {
        Outcome::Done(_) => false,
        Outcome::Failed(_) | Outcome::Invalid => true,
    }
}

/// One request's outcomes: a JSON array on one line, or a line each for a person.
fn print_outcomes<H: CliHandler>(
    outcomes: &[Outcome<H::Output, H::Error>],
    output: Output,
) -> anyhow::Result<()> {
    let json: Vec<Value> = outcomes.iter().map(outcome_json::<H>).collect();
    match output {
        Output::Json => crate::outln!("{}", serde_json::to_string(&json)?),
        Output::Table => {
            for value in &json {
                let said = value.get("output").or_else(|| value.get("error"));
                crate::outln!(
                    "{} {}",
                    value["outcome"].as_str().unwrap_or("?"),
                    said.unwrap_or(&Value::Null)
                );
            }
        }
    }
    Ok(())
}

/// One command from its JSON, read as the gateway reads one ([`json::read`]): a
/// field its type does not have refuses it, and an integer out of range is named as sent.
fn parse<H: CliHandler>(text: &str) -> anyhow::Result<H::Command> {
    json::read(text.as_bytes()).with_context(|| format!("{text} is not a command"))
}

/// A line of standard input: one command, or an array of them (read as [`parse`] reads one).
fn parse_line<H: CliHandler>(line: &str) -> anyhow::Result<Vec<H::Command>> {
    if line.trim_start().starts_with('[') {
        return json::read(line.as_bytes()).context("not an array of commands");
    }
    Ok(vec![parse::<H>(line)?])
}

/// The JSON form of one command's outcome: `{"outcome": "done", "output": ...}`,
/// `{"outcome": "failed", "error": ...}` or `{"outcome": "invalid"}`, each field of the same
/// JSON type as the gateway's answer gives it (a 128-bit integer a string of digits:
/// `gateway::json::Wide`).
pub fn outcome_json<H: CliHandler>(outcome: &Outcome<H::Output, H::Error>) -> Value {
    match outcome {
        Outcome::Done(output) => json!({ "outcome": "done", "output": to_json(output) }),
        Outcome::Failed(error) => json!({ "outcome": "failed", "error": to_json(error) }),
        Outcome::Invalid => json!({ "outcome": "invalid" }),
    }
}

/// A value as JSON, as the gateway writes it (one that does not serialize prints as the
/// serializer's message).
fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(Wide(value)).unwrap_or_else(|error| Value::String(error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::gateway::tests::{Order, Shop};

    /// The whole message of a refused command line or argument.
    fn refused(parsed: anyhow::Result<impl std::fmt::Debug>) -> String {
        format!("{:#}", parsed.expect_err("refused"))
    }

    /// Proves `client` reads commands as the gateway does: a field the command's type does
    /// not have refuses the line (or the argument) with the field's path, and an integer out
    /// of range is named with the digits it was sent as; right commands are taken.
    #[test]
    fn client_refuses_unknown_fields_and_names_out_of_range_integers() {
        let memo = r#"{"Pay": {"from": 1, "to": 2, "amount": 1, "memo": "x"}}"#;
        let error = refused(parse::<Shop>(memo));
        assert!(
            error.contains("unknown field `memo` at Pay.memo"),
            "{error}"
        );
        let error = refused(parse_line::<Shop>(&format!(r#"["Count", {memo}]"#)));
        assert!(
            error.contains("unknown field `memo` at [1].Pay.memo"),
            "{error}"
        );
        let big = r#"[{"Pay": {"from": 1, "to": 2, "amount": 18446744073709551616}}]"#;
        let error = refused(parse_line::<Shop>(big));
        assert!(
            error.contains("18446744073709551616 is out of range for u64 at [0].Pay.amount"),
            "{error}"
        );
        let negative = r#"{"Pay": {"from": 1, "to": 2, "amount": -1}}"#;
        let error = refused(parse_line::<Shop>(negative));
        assert!(
            error.contains("-1 is out of range for u64 at Pay.amount"),
            "{error}"
        );
        let taken = r#"["Count", {"Pay": {"from": 1, "to": 2, "amount": 3}}]"#;
        assert_eq!(parse_line::<Shop>(taken).unwrap().len(), 2);
        assert_eq!(parse::<Shop>(r#""Count""#).unwrap(), Order::Count);
    }
}
