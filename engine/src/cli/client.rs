//! `client`: commands read as JSON, sent as requests, outcomes printed as JSON: a handler's
//! commands scripted from a shell, with no client code of the author's.

use super::{CliHandler, runtime};
use crate::client::Client;
use crate::handler::Outcome;
use anyhow::Context;
use clap::Args;
use serde_json::{Value, json};
use std::io::BufRead;
use std::path::PathBuf;
use std::time::Duration;

/// Seconds `client` keeps trying a request by default before it gives up.
pub const CLIENT_GIVE_UP_SECS_DEFAULT: f64 = 30.0;

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
    /// Seconds to keep trying a request before giving up (its outcome is then unknown).
    #[arg(long, default_value_t = CLIENT_GIVE_UP_SECS_DEFAULT)]
    pub give_up_after: f64,
}

/// Sends the commands; prints each request's outcomes as one JSON array per line.
pub fn client<H: CliHandler>(args: ClientArgs) -> anyhow::Result<()> {
    let mut config = super::read_client_file(&args.cluster)?.client_config()?;
    config.give_up_after = Some(Duration::from_secs_f64(args.give_up_after));
    let runtime = runtime()?;
    // A fresh id per run, registered through the log: its requests are numbered from 1.
    let mut client = runtime.block_on(Client::register(config))?;
    let mut send = |commands: Vec<H::Command>| -> anyhow::Result<()> {
        let outcomes = runtime.block_on(client.submit::<H>(&commands))?;
        let json: Vec<Value> = outcomes.iter().map(outcome_json::<H>).collect();
        println!("{}", serde_json::to_string(&json)?);
        Ok(())
    };
    if !args.commands.is_empty() {
        let commands = args.commands.iter().map(|text| parse::<H>(text));
        return send(commands.collect::<anyhow::Result<_>>()?);
    }
    for (number, line) in std::io::stdin().lock().lines().enumerate() {
        let line = line.context("reading standard input")?;
        if line.trim().is_empty() {
            continue;
        }
        let commands = parse_line::<H>(&line).with_context(|| format!("line {}", number + 1))?;
        send(commands)?;
    }
    Ok(())
}

/// One command from its JSON.
fn parse<H: CliHandler>(text: &str) -> anyhow::Result<H::Command> {
    serde_json::from_str(text).with_context(|| format!("{text} is not a command"))
}

/// A line of standard input: one command, or an array of them.
fn parse_line<H: CliHandler>(line: &str) -> anyhow::Result<Vec<H::Command>> {
    if let Value::Array(items) = serde_json::from_str::<Value>(line)? {
        let command = |item| serde_json::from_value(item).context("not a command");
        return items.into_iter().map(command).collect();
    }
    Ok(vec![parse::<H>(line)?])
}

/// The JSON form of one command's outcome: `{"outcome": "done", "output": ...}`,
/// `{"outcome": "failed", "error": ...}` or `{"outcome": "invalid"}`.
pub fn outcome_json<H: CliHandler>(outcome: &Outcome<H::Output, H::Error>) -> Value {
    match outcome {
        Outcome::Done(output) => json!({ "outcome": "done", "output": to_json(output) }),
        Outcome::Failed(error) => json!({ "outcome": "failed", "error": to_json(error) }),
        Outcome::Invalid => json!({ "outcome": "invalid" }),
    }
}

/// A value as JSON (one that does not serialize prints as the serializer's message).
fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or_else(|error| Value::String(error.to_string()))
}
