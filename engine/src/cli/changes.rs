//! `changes`: the change stream on standard output, every committed command and its outcome
//! in the one global order, from a position on (`--follow`: and every later commit), read
//! from a follower. A position is `ENTRY.POSITION` (`ENTRY` alone is its first command);
//! the lines name theirs, so a consumer that stops resumes from the last one it kept, and
//! lines seen twice carry the same position.

use super::gateway::json::Wide;
use super::{CliHandler, Exit, coded, runtime};
use crate::client::{ChangeStream, ChangesError, Connects};
use crate::codec;
use crate::handler::{Handler, OutcomeOf};
use crate::ids::{EntryIndex, NodeId};
use clap::Args;
use net::message::{ChangeBatch, ChangeEntry, ChangePosition};
use serde_json::{Value, json};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// Milliseconds a node may hold a `--follow` reader's request while nothing new commits.
pub const CHANGES_FOLLOW_WAIT_MS: u64 = 1_000;
/// Milliseconds a node may hold a reader's request for entries it applied and has not
/// journaled yet (without `--follow`, the stream ends at the node's last applied entry).
pub const CHANGES_CATCH_UP_WAIT_MS: u64 = 200;
/// Milliseconds a `--follow` reader waits before asking again after no node answered.
pub const CHANGES_RETRY_MS: u64 = 500;
/// Seconds each node has to answer its status when the reader picks a follower.
pub const CHANGES_STATUS_TIMEOUT_S: f64 = 2.0;

/// What the change stream publishes of a command that ran, as a handler's own choice
/// ([`Publish::chosen`]): the command and its outcome as JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct Published {
    /// The command (or what the handler tells of it).
    pub command: Value,
    /// Its outcome (or what the handler tells of it).
    pub outcome: Value,
}

impl Published {
    /// The command as serde writes it and its outcome as `client` prints it: what
    /// [`publish_all`] publishes, for a choice that publishes some commands whole.
    pub fn whole<H>(command: &H::Command, outcome: &OutcomeOf<H>) -> Published
    where
        H: CliHandler<Command: serde::Serialize>,
    {
        Published {
            command: serde_json::to_value(Wide(command)).unwrap_or_else(|e| json!(e.to_string())),
            outcome: super::outcome_json::<H>(outcome),
        }
    }
}

/// What the change stream publishes of each command that ran: [`publish_all`], every command
/// and its outcome (written straight as JSON), or the handler's own choice
/// ([`Publish::chosen`]).
pub struct Publish<H: Handler>(Choice<H>);

/// How a [`Publish`] writes a command.
enum Choice<H: Handler> {
    /// Every command whole, with this writer of its JSON.
    All(fn(&H::Command, &mut Vec<u8>) -> serde_json::Result<()>),
    /// What the handler's function says (`None`: the command is left out).
    Chosen(fn(&H::Command, &OutcomeOf<H>) -> Option<Published>),
}

impl<H: Handler> Clone for Publish<H> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<H: Handler> Copy for Publish<H> {}

impl<H: Handler> Clone for Choice<H> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<H: Handler> Copy for Choice<H> {}

impl<H: Handler> Publish<H> {
    /// The handler's own choice: `choose` says what is published of each command (its own
    /// description of it, or `None` to leave it out).
    pub fn chosen(choose: fn(&H::Command, &OutcomeOf<H>) -> Option<Published>) -> Self {
        Publish(Choice::Chosen(choose))
    }
}

/// Every command as serde writes it and its outcome as `client` prints it (a 128-bit integer
/// as a string of its digits), for a command type that is also `Serialize`.
pub fn publish_all<H>() -> Publish<H>
where
    H: CliHandler<Command: serde::Serialize>,
{
    Publish(Choice::All(|command, out| {
        serde_json::to_writer(out, &Wide(command))
    }))
}

/// A change's bytes that this build's handler cannot decode (another build's stream, or a
/// damaged journal on the node).
#[derive(Debug, thiserror::Error)]
#[error("entry {index}, position {position}: the {what} does not decode: {error}")]
pub struct Undecodable {
    /// The entry.
    pub index: EntryIndex,
    /// The command's position.
    pub position: u32,
    /// `command` or `outcome`.
    pub what: &'static str,
    /// Why.
    pub error: codec::CodecError,
}

/// Where a line of the stream stands within its entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// The upgrade line before the entry's commands (its `position` reads 0, and it names no
    /// command: the command at position 0 has a line of its own).
    Upgrade,
    /// The line of the command at this position.
    Command(u32),
}

/// Turns the changes of a stream into its JSON lines: one object per published command
/// (`index`, `position`, `version`, `command`, `outcome`), and one when the handler version
/// changes (`upgrade`: from and to, `command` and `outcome` null).
pub struct Lines<H: CliHandler> {
    publish: Publish<H>,
    version: Option<u32>,
    /// The line being written.
    line: Vec<u8>,
}

impl<H: CliHandler> Lines<H> {
    /// Lines published with `publish`.
    pub fn new(publish: Publish<H>) -> Self {
        Lines {
            publish,
            version: None,
            line: Vec::new(),
        }
    }

    /// The handler version of the last entry written (`None` before the first).
    pub fn version(&self) -> Option<u32> {
        self.version
    }

    /// Takes `version` for the handler version of the entry before the next one written: a
    /// reader that goes back to where its consumer confirmed passes the version it had there,
    /// so an upgrade among the entries read again still shows; `None` when it is unknown (no
    /// upgrade line before the next entry).
    pub fn resume_version(&mut self, version: Option<u32>) {
        self.version = version;
    }

    /// Hands each line of `entry` to `each`, in order, with its place (no newline).
    pub fn write(
        &mut self,
        entry: &ChangeEntry,
        mut each: impl FnMut(Place, &[u8]),
    ) -> Result<(), anyhow::Error> {
        let index = entry.index.0;
        if let Some(before) = self.version.filter(|&v| v != entry.version) {
            let upgrade = json!({ "from": before, "to": entry.version });
            let line = json!({ "index": index, "position": 0, "version": entry.version,
                "command": null, "outcome": null, "upgrade": upgrade });
            each(Place::Upgrade, &serde_json::to_vec(&line)?);
        }
        self.version = Some(entry.version);
        for change in crate::apply::changes(&entry.changes)? {
            let failed = |what, error| Undecodable {
                index: entry.index,
                position: change.position,
                what,
                error,
            };
            let command =
                codec::decode::<H::Command>(change.command).map_err(|e| failed("command", e))?;
            let outcome =
                codec::decode::<OutcomeOf<H>>(change.outcome).map_err(|e| failed("outcome", e))?;
            let at = (index, change.position, entry.version);
            if self.line_of(at, &command, &outcome)? {
                each(Place::Command(change.position), &self.line);
            }
        }
        Ok(())
    }

    /// The lines of `entry`, in order, as JSON values.
    pub fn of(&mut self, entry: &ChangeEntry) -> Result<Vec<Value>, anyhow::Error> {
        let mut lines = Vec::new();
        let mut failed = None;
        self.write(entry, |_, line| match serde_json::from_slice(line) {
            Ok(value) => lines.push(value),
            Err(error) => failed = Some(error),
        })?;
        failed.map_or(Ok(lines), |error| Err(error.into()))
    }

    /// Writes the line of one command into `self.line`; false when it is not published.
    fn line_of(
        &mut self,
        (index, position, version): (u64, u32, u32),
        command: &H::Command,
        outcome: &OutcomeOf<H>,
    ) -> serde_json::Result<bool> {
        use std::io::Write as _;
        let line = &mut self.line;
        line.clear();
        let head = r#"{"index":"#;
        write!(
            line,
            r#"{head}{index},"position":{position},"version":{version},"command":"#
        )
        .map_err(serde_json::Error::io)?;
        match self.publish.0 {
            Choice::All(write_command) => {
                write_command(command, line)?;
                line.extend_from_slice(br#","outcome":"#);
                super::gateway::write_outcome(outcome, line)?;
            }
            Choice::Chosen(choose) => {
                let Some(published) = choose(command, outcome) else {
                    return Ok(false);
                };
                serde_json::to_writer(&mut *line, &published.command)?;
                line.extend_from_slice(br#","outcome":"#);
                serde_json::to_writer(&mut *line, &published.outcome)?;
            }
        }
        line.push(b'}');
        Ok(true)
    }
}

/// A position as the command line and the gateway take it: `ENTRY` or `ENTRY.POSITION`.
pub fn parse_position(text: &str) -> Result<ChangePosition, PositionError> {
    let (index, position) = text.split_once('.').unwrap_or((text, "0"));
    let index = index.parse().map_err(|_| PositionError(text.to_string()))?;
    let position = position
        .parse()
        .map_err(|_| PositionError(text.to_string()))?;
    Ok(ChangePosition {
        index: EntryIndex(index),
        position,
    })
}

/// A position that is not `ENTRY` or `ENTRY.POSITION`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a position: ENTRY or ENTRY.POSITION (decimal: 1200 or 1200.7)")]
pub struct PositionError(pub String);

/// Options of `changes`.
#[derive(Args, Debug)]
pub struct ChangesArgs {
    /// The cluster file, or a client file (`client-file` writes one).
    #[arg(long, env = crate::cli::CLUSTER_FILE_ENV, visible_alias = "client-file")]
    pub cluster: PathBuf,
    /// The first change wanted: ENTRY, or ENTRY.POSITION for a command within the entry
    /// (each line names its own: resume from the last one kept). A position older than any
    /// node keeps is an error that names the oldest one served (exit 4, refused).
    #[arg(long, value_name = "POSITION", value_parser = parse_position)]
    pub from: ChangePosition,
    /// Keep reading new commits as they come, until interrupted (a node that stops is
    /// replaced by another).
    #[arg(long)]
    pub follow: bool,
    /// One JSON object a line (`index`, `position`, `version`, `command`, `outcome`);
    /// without it, one line per change for a person.
    #[arg(long)]
    pub json: bool,
    /// Read from this node only (by default a follower, then any node). Without --follow
    /// the stream ends at the highest commit a node names when it starts.
    #[arg(long, value_name = "ID")]
    pub node: Option<u8>,
}

/// Prints the change stream from `args.from` on, published with `publish`.
pub fn changes<H: CliHandler>(args: ChangesArgs, publish: Publish<H>) -> anyhow::Result<()> {
    let file = super::read_client_file(&args.cluster)?;
    let nodes: Vec<_> = (file.nodes.iter())
        .filter(|n| args.node.is_none_or(|only| only == n.id))
        .map(|n| (NodeId(n.id), n.client_address.clone()))
        .collect();
    if nodes.is_empty() {
        let error = anyhow::anyhow!("the file names no node {}", args.node.unwrap_or_default());
        return Err(coded(Exit::Usage, error));
    }
    let config = file.client_config()?;
    let stream = ChangeStream::new(config, nodes, args.from);
    runtime()?.block_on(print_stream::<H, _>(stream, &args, Lines::new(publish)))
}

async fn print_stream<H: CliHandler, C: Connects>(
    mut stream: ChangeStream<C>,
    args: &ChangesArgs,
    mut lines: Lines<H>,
) -> anyhow::Result<()> {
    let timeout = Duration::from_secs_f64(CHANGES_STATUS_TIMEOUT_S);
    // Without --follow, the stream ends at what was committed when it started.
    let committed = stream.prefer_followers(timeout).await;
    let wait = Duration::from_millis(match args.follow {
        true => CHANGES_FOLLOW_WAIT_MS,
        false => CHANGES_CATCH_UP_WAIT_MS,
    });
    let mut out = std::io::stdout().lock();
    loop {
        let batch = match stream.next_batch(wait).await {
            Ok(batch) => batch,
            Err(ChangesError::Unreachable(errors)) if args.follow => {
                tracing::warn!(?errors, "no node answered; asking again");
                tokio::time::sleep(Duration::from_millis(CHANGES_RETRY_MS)).await;
                continue;
            }
            Err(error) => return Err(exit_of(error)),
        };
        for entry in &batch.entries {
            let mut printed = Ok(());
            lines.write(entry, |_, line| {
                if printed.is_ok() {
                    printed = print_line(&mut out, line, args.json);
                }
            })?;
            printed?;
        }
        out.flush()?;
        if !args.follow && caught_up(&batch, committed) {
            return Ok(());
        }
    }
}

/// True when a batch reaches past `committed` (without it, past the last entry its node had
/// applied when it answered).
fn caught_up(batch: &ChangeBatch, committed: Option<EntryIndex>) -> bool {
    batch.next.index > committed.unwrap_or(batch.applied)
}

fn print_line(out: &mut impl Write, line: &[u8], json: bool) -> std::io::Result<()> {
    if json {
        out.write_all(line)?;
        return out.write_all(b"\n");
    }
    let line: Value = serde_json::from_slice(line).map_err(std::io::Error::other)?;
    let at = format!("{}.{}", line["index"], line["position"]);
    match line.get("upgrade") {
        Some(upgrade) => writeln!(out, "{at}\thandler upgraded {upgrade}"),
        None => writeln!(out, "{at}\t{}\t{}", line["command"], line["outcome"]),
    }
}

/// The error of a stream that cannot go on, with its exit code: a position no node holds is
/// refused for good (4), no node answering is unreachable (2).
pub(super) fn exit_of(error: ChangesError) -> anyhow::Error {
    let exit = match &error {
        ChangesError::Gone { .. } | ChangesError::Missing { .. } | ChangesError::Off(_) => {
            Exit::Refused
        }
        ChangesError::Unreachable(_) => Exit::Unreachable,
        ChangesError::Refused { error, .. } => Exit::of_client(error),
    };
    coded(exit, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cli::gateway::tests::{Order, Receipt, Refusal, Shop};
    use crate::handler::Outcome;

    /// An entry of `index` holding `changes` (position, command, outcome), as a node serves it.
    fn entry(index: u64, version: u32, changes: &[(u32, Order, OutcomeOf<Shop>)]) -> ChangeEntry {
        let mut ran = crate::apply::Ran::default();
        for (position, command, outcome) in changes {
            ran.push_change(&crate::apply::Change {
                position: *position,
                command: &codec::encode_to_vec(command).unwrap(),
                outcome: &codec::encode_to_vec(outcome).unwrap(),
            });
        }
        ChangeEntry {
            index: EntryIndex(index),
            version,
            changes: ran.changes,
        }
    }

    /// A handler's choice: what the shop did, never what it refused.
    fn done_only(order: &Order, outcome: &OutcomeOf<Shop>) -> Option<Published> {
        match outcome {
            Outcome::Done(_) => Some(Published::whole::<Shop>(order, outcome)),
            Outcome::Failed(_) | Outcome::Invalid => None,
        }
    }

    /// Proves the lines written straight as JSON are the command as serde writes it and the
    /// outcome as `client` prints it (128-bit integers as strings), a handler's choice leaves
    /// out what it says to, and a version change comes as an upgrade line first.
    #[test]
    fn lines_hold_what_is_published() {
        let pay = Order::Pay {
            from: 1,
            to: 2,
            amount: 3,
        };
        let paid = Outcome::Done(Receipt::Paid {
            balance: 1,
            total: u128::MAX,
            net: -1,
        });
        let changes = [
            (0, pay.clone(), paid.clone()),
            (2, pay.clone(), Outcome::Failed(Refusal::Full)),
        ];
        let mut all = Lines::<Shop>::new(publish_all::<Shop>());
        let lines = all.of(&entry(7, 1, &changes)).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["command"], serde_json::to_value(&pay).unwrap());
        assert_eq!(lines[0]["outcome"], crate::cli::outcome_json::<Shop>(&paid));
        assert_eq!(
            lines[0]["outcome"]["output"]["Paid"]["total"],
            json!(u128::MAX.to_string())
        );
        assert_eq!(
            (&lines[1]["index"], &lines[1]["position"]),
            (&json!(7), &json!(2))
        );
        let mut chosen = Lines::<Shop>::new(Publish::chosen(done_only));
        let lines = chosen.of(&entry(7, 1, &changes)).unwrap();
        assert_eq!(lines.len(), 1, "the refused order is left out");
        let upgraded = chosen.of(&entry(8, 2, &changes[..1])).unwrap();
        assert_eq!(upgraded[0]["upgrade"], json!({"from": 1, "to": 2}));
        assert_eq!(upgraded[1]["version"], json!(2));
        assert_eq!(chosen.version(), Some(2));
        // Read again from entry 8, the version before it given back: the upgrade shows again.
        chosen.resume_version(Some(1));
        let again = chosen.of(&entry(8, 2, &changes[..1])).unwrap();
        assert_eq!(again, upgraded);
        chosen.resume_version(None);
        assert_eq!(chosen.of(&entry(8, 2, &changes[..1])).unwrap().len(), 1);
        // The upgrade line is no command's place: a consumer that names messages by place
        // (the publisher's per-command ids) must not take it for the command at position 0.
        chosen.resume_version(Some(1));
        let mut places = Vec::new();
        chosen
            .write(&entry(8, 2, &changes[..1]), |place, _| places.push(place))
            .unwrap();
        assert_eq!(places, [Place::Upgrade, Place::Command(0)]);
    }

    /// Proves positions read as entry and position, an entry alone as its first command, and
    /// anything else is refused naming the text.
    #[test]
    fn positions_read_as_entry_and_command() {
        let at = |index, position| ChangePosition {
            index: EntryIndex(index),
            position,
        };
        assert_eq!(parse_position("1200"), Ok(at(1200, 0)));
        assert_eq!(parse_position("1200.7"), Ok(at(1200, 7)));
        for bad in ["", "x", "1.2.3", "-1", "1.", ".4"] {
            let error = parse_position(bad).expect_err(bad);
            assert!(error.to_string().contains(&format!("{bad:?}")), "{error}");
        }
    }
}
