//! `completions SHELL` and `man --out DIR`: a binary's shell completions and man pages,
//! generated from its clap command line (clap_complete, clap_mangen), so they never disagree
//! with `--help`.

use clap::Args;
use std::path::PathBuf;

/// Options of `completions`.
#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell whose completion script to print on standard output (`source <(runner
    /// completions bash)`, or save it where the shell looks).
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Options of `man`.
#[derive(Args, Debug)]
pub struct ManArgs {
    /// The directory to write the pages into (created if missing): `NAME.1`, and
    /// `NAME-COMMAND.1` for each command.
    #[arg(long)]
    pub out: PathBuf,
}

/// Prints the completion script of `line` for the shell asked for.
pub fn completions(args: CompletionsArgs, mut line: clap::Command) -> anyhow::Result<()> {
    let name = line.get_name().to_string();
    // Into memory first: clap_complete panics on a failed write (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut line, name, &mut script);
    super::stdout::write(&script);
    Ok(())
}

/// Writes the man pages of `line` and of each of its commands into `--out`.
pub fn man(args: ManArgs, line: clap::Command) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)
        .map_err(|error| anyhow::anyhow!("creating {}: {error}", args.out.display()))?;
    clap_mangen::generate_to(line, &args.out)
        .map_err(|error| anyhow::anyhow!("writing into {}: {error}", args.out.display()))?;
    Ok(())
}
