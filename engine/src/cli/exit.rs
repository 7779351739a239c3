//! The exit codes of every command, in one place: what a script may rely on. The table is in
//! `notes/operations.md` ("Exit codes"); why, in `notes/decisions/cli-contract.md`.

use super::logging::{self, LogFormat};
use super::status::Unhealthy;
use crate::client::ClientError;
use crate::operator::cluster_file::ClusterFileError;
use crate::operator::secrets::SecretError;
use anyhow::Context;

/// How a command ended, as its process's exit status. Every command of a node binary ends
/// with one of these and no other number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Exit {
    /// It did what was asked; `status`: the cluster is healthy.
    Success = 0,
    /// It ran and the answer is no: `status`, the cluster is degraded (a node unreachable,
    /// halted, diverged or out of disk, or no leader a majority follows); `client`, the
    /// handler refused a command (unless `--allow-refused`); `replay`, a difference; `bench`
    /// and `local`, a command failed or went unanswered, the workload's check failed or the
    /// replicas differ.
    Negative = 1,
    /// No answer within the timeout: no node of the cluster answered (`status`), or a
    /// request went unanswered (`client`: its outcome is unknown).
    Unreachable = 2,
    /// Bad invocation (an unknown option, a bad value, a missing argument) or a bad file (a
    /// cluster, client or secret file that is missing, unreadable or invalid; `check` found
    /// errors in it). Nothing was sent.
    Usage = 3,
    /// The cluster refused the request itself: the credential does not allow it, another
    /// cluster or version, or the request was rejected. Trying again as is will not help.
    Refused = 4,
    /// Anything else: a node that stopped on a fault or whose start was refused, a disk or
    /// network error, a bug.
    Failed = 5,
}

impl Exit {
    /// Every exit code, in order (the tests walk the table).
    pub const ALL: [Exit; 6] = [
        Exit::Success,
        Exit::Negative,
        Exit::Unreachable,
        Exit::Usage,
        Exit::Refused,
        Exit::Failed,
    ];

    /// The number the process exits with.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The code's one-word name: what a help text writes beside the number, so that a
    /// test can hold every help text to the table.
    pub fn name(self) -> &'static str {
        match self {
            Exit::Success => "success",
            Exit::Negative => "negative",
            Exit::Unreachable => "unreachable",
            Exit::Usage => "usage",
            Exit::Refused => "refused",
            Exit::Failed => "failed",
        }
    }

    /// What the code means, in the words every command's help ends with.
    pub fn meaning(self) -> &'static str {
        match self {
            Exit::Success => "it did what was asked (status: the cluster is healthy)",
            Exit::Negative => {
                "it ran and the answer is no: degraded, a refused command, a difference, a \
                 failed benchmark"
            }
            Exit::Unreachable => "no answer within the timeout (an outcome may be unknown)",
            Exit::Usage => "a bad command line or file (nothing was sent)",
            Exit::Refused => "the cluster refused the request: the credential, cluster or version",
            Exit::Failed => "anything else: a node's fault, a disk or network error, a bug",
        }
    }

    /// The exit code a command's error calls for: the first typed error in its chain that
    /// says; [`Exit::Failed`] when none does.
    pub fn of(error: &anyhow::Error) -> Exit {
        if let Some(coded) = find::<Coded>(error) {
            return coded.exit;
        }
        if find::<clap::Error>(error).is_some()
            || find::<ClusterFileError>(error).is_some()
            || find::<SecretError>(error).is_some()
            || find::<crate::state::CapacityTooSmall>(error).is_some()
        {
            return Exit::Usage;
        }
        if let Some(unhealthy) = find::<Unhealthy>(error) {
            return unhealthy.exit();
        }
        // A node refused an operator command's credential (or cluster, or version).
        if find::<crate::client::OperatorRefused>(error).is_some()
            || find::<super::client::KeyRefused>(error).is_some()
        {
            return Exit::Refused;
        }
        if find::<super::replay::Differs>(error).is_some()
            || find::<super::client::Refused>(error).is_some()
            || find::<super::bench::BenchFailed>(error).is_some()
        {
            return Exit::Negative;
        }
        match find::<ClientError>(error) {
            Some(error) => Exit::of_client(error),
            None => Exit::Failed,
        }
    }

    /// The exit code of a client library error.
    pub fn of_client(error: &ClientError) -> Exit {
        match error {
            ClientError::GaveUp { .. } | ClientError::Unreachable(_) => Exit::Unreachable,
            // An expired session is the cluster refusing the id itself: asking again with it
            // will not help (register a new one).
            ClientError::Rejected(_) | ClientError::Refused(_) | ClientError::SessionExpired(_) => {
                Exit::Refused
            }
            ClientError::Stale(_)
            | ClientError::Reused(_)
            | ClientError::OutcomeCount { .. }
            | ClientError::Decode(_)
            | ClientError::NoRandomness(_) => Exit::Failed,
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        std::process::ExitCode::from(exit.code())
    }
}

/// The heading of the exit codes' table at the end of every command's help.
pub const EXIT_CODES_HEADING: &str = "Exit codes:";

/// The exit codes' table every command's help ends with, from [`Exit::ALL`].
pub fn exit_codes_help() -> String {
    let mut table = String::from(EXIT_CODES_HEADING);
    for exit in Exit::ALL {
        let row = format!(
            "\n  {}  {:<11}  {}",
            exit.code(),
            exit.name(),
            exit.meaning()
        );
        table.push_str(&row);
    }
    table
}

/// `line` and every command under it, their help ending with [`exit_codes_help`].
pub fn with_exit_codes(line: clap::Command) -> clap::Command {
    line.after_help(exit_codes_help())
        .mut_subcommands(with_exit_codes)
}

/// Parses the process's command line into `P`, with the exit codes' table in every help;
/// a line clap cannot parse (or `--help`, `--version`) gives the exit code to end with.
pub fn parse_command_line<P: clap::Parser>() -> Result<P, std::process::ExitCode> {
    let matches = with_exit_codes(P::command()).try_get_matches();
    matches
        .and_then(|matches| P::from_arg_matches(&matches))
        .map_err(|error| parse_failed(&error))
}

/// An error that names its exit code, for a failure no typed error of its own tells apart.
#[derive(Debug, thiserror::Error)]
#[error("{error:#}")]
pub struct Coded {
    /// The exit code.
    pub exit: Exit,
    error: anyhow::Error,
}

/// `error` with the exit code `exit`.
pub fn coded(exit: Exit, error: impl Into<anyhow::Error>) -> anyhow::Error {
    let error = error.into();
    Coded { exit, error }.into()
}

/// The first `T` in `error`: a context of it, its root, or a source on the way.
fn find<T: std::error::Error + Send + Sync + 'static>(error: &anyhow::Error) -> Option<&T> {
    error
        .downcast_ref::<T>()
        .or_else(|| error.chain().find_map(|cause| cause.downcast_ref::<T>()))
}

/// The exit code of a command's result; an error is logged first, on one line (its causes
/// joined): `Error: ...` for a person, or a `tracing` event with `--log-format json`, so that
/// every line on standard error is then JSON.
pub fn exit_code(result: anyhow::Result<()>) -> std::process::ExitCode {
    let result = result.and_then(|()| match super::stdout::failure() {
        Some(kind) => {
            Err(coded(Exit::Failed, std::io::Error::from(kind))).context("writing standard output")
        }
        None => Ok(()),
    });
    let exit = match &result {
        Ok(()) => Exit::Success,
        Err(error) => {
            let exit = Exit::of(error);
            report(error, exit);
            exit
        }
    };
    exit.into()
}

/// Says why the command failed, in the log format in force.
fn report(error: &anyhow::Error, exit: Exit) {
    match logging::format() {
        LogFormat::Human => eprintln!("Error: {error:#}"),
        LogFormat::Json => tracing::error!(exit = exit.code(), "{error:#}"),
    }
}

/// The exit of a command line clap could not parse (bad invocation: [`Exit::Usage`]), or of
/// `--help` and `--version` (success), after clap printed what it prints (usage on standard
/// error; help and version on standard output). Clap's own exit would be 2, which here means
/// unreachable.
pub fn parse_failed(error: &clap::Error) -> std::process::ExitCode {
    use clap::error::ErrorKind;
    let _ = error.print();
    let asked = matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    );
    if asked { Exit::Success } else { Exit::Usage }.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::NodeId;

    /// Proves the numbers of the table are the ones documented, each used once.
    #[test]
    fn the_codes_are_the_table() {
        let codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        assert_eq!(codes, vec![0, 1, 2, 3, 4, 5]);
    }

    /// Proves an error is classified by the typed error in its chain, through contexts.
    #[test]
    fn errors_are_classified_by_their_type() {
        use anyhow::Context;
        let nobody = Unhealthy {
            problems: vec![status_unreachable(1), status_unreachable(2)],
            answered: 0,
            refused: 0,
        };
        let nobody = Err::<(), _>(nobody).context("looking");
        assert_eq!(Exit::of(&nobody.unwrap_err()), Exit::Unreachable);
        let degraded = Unhealthy {
            problems: vec![status_unreachable(1)],
            answered: 2,
            refused: 0,
        };
        assert_eq!(Exit::of(&degraded.into()), Exit::Negative);
        let gave_up = ClientError::GaveUp {
            attempts: 3,
            seconds: 1.0,
            last_rejection: None,
        };
        let gave_up = Err::<(), _>(gave_up).context("registering");
        assert_eq!(Exit::of(&gave_up.unwrap_err()), Exit::Unreachable);
        let coded = coded(Exit::Usage, anyhow::anyhow!("no such file"));
        let coded = Err::<(), _>(coded).context("reading");
        assert_eq!(Exit::of(&coded.unwrap_err()), Exit::Usage);
        assert_eq!(Exit::of(&anyhow::anyhow!("disk")), Exit::Failed);
        let refused = crate::client::OperatorRefused {
            command: "mode",
            node: 1,
            refusal: net::message::Refusal::Unauthenticated,
        };
        let refused = Err::<(), _>(refused).context("setting the mode");
        assert_eq!(Exit::of(&refused.unwrap_err()), Exit::Refused);
    }

    fn status_unreachable(id: u8) -> super::super::status::Problem {
        super::super::status::Problem::Unreachable(NodeId(id))
    }
}
