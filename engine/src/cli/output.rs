//! The one output switch every command that prints a result has: `--output table|json`, and
//! `--json [FILE]` beside it with one meaning everywhere.

use clap::Args;
use std::path::{Path, PathBuf};

/// The `--json` value that means standard output (`--json` given without a file).
pub const JSON_STDOUT: &str = "-";

/// What standard output holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Lines for a person (a table, a sentence); their layout may change between versions.
    #[default]
    Table,
    /// Exactly one JSON document (one value, pretty-printed), and nothing else.
    Json,
}

/// `--output` and `--json`, flattened into a command's options.
#[derive(Args, Debug, Clone, Default)]
pub struct OutputArgs {
    /// What standard output holds: `table` (lines for a person) or `json` (exactly one JSON
    /// document, nothing else).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Output::Table)]
    pub output: Output,
    /// `--json` alone is `--output json`. `--json FILE` also writes the JSON document to
    /// FILE, standard output keeping the `--output` form.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = JSON_STDOUT)]
    pub json: Option<PathBuf>,
}

impl OutputArgs {
    /// JSON on standard output.
    pub fn json() -> Self {
        OutputArgs {
            output: Output::Json,
            json: None,
        }
    }

    /// The form standard output takes.
    pub fn stdout(&self) -> Output {
        match &self.json {
            Some(target) if target == Path::new(JSON_STDOUT) => Output::Json,
            Some(_) | None => self.output,
        }
    }

    /// The file `--json FILE` names, if any.
    pub fn file(&self) -> Option<&Path> {
        let target = self.json.as_deref()?;
        (target != Path::new(JSON_STDOUT)).then_some(target)
    }

    /// Writes the result: `value` as JSON (to standard output, or to the file as well), or
    /// the lines `table` prints.
    pub fn emit(&self, value: &serde_json::Value, table: impl FnOnce()) -> anyhow::Result<()> {
        if let Some(file) = self.file() {
            let text = serde_json::to_string_pretty(value)? + "\n";
            std::fs::write(file, text)
                .map_err(|error| anyhow::anyhow!("writing {}: {error}", file.display()))?;
        }
        match self.stdout() {
            Output::Json => crate::outln!("{}", serde_json::to_string_pretty(value)?),
            Output::Table => table(),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Line {
        #[command(flatten)]
        output: OutputArgs,
        #[arg(long)]
        cluster: Option<PathBuf>,
    }

    fn parse(args: &[&str]) -> OutputArgs {
        let line = std::iter::once("cmd").chain(args.iter().copied());
        Line::try_parse_from(line).unwrap().output
    }

    /// Proves the switch's one meaning: `--json` alone and `--output json` put JSON on
    /// standard output; `--json FILE` adds a file and leaves standard output to `--output`;
    /// `--json` followed by an option takes no value.
    #[test]
    fn json_means_one_thing() {
        assert_eq!(parse(&[]).stdout(), Output::Table);
        assert_eq!(parse(&["--output", "json"]).stdout(), Output::Json);
        let alone = parse(&["--json", "--cluster", "c.toml"]);
        assert_eq!((alone.stdout(), alone.file()), (Output::Json, None));
        let file = parse(&["--json", "out.json"]);
        let expected = Some(Path::new("out.json"));
        assert_eq!((file.stdout(), file.file()), (Output::Table, expected));
        let both = parse(&["--json", "out.json", "--output", "json"]);
        assert_eq!((both.stdout(), both.file()), (Output::Json, expected));
        assert!(Line::try_parse_from(["cmd", "--output", "yaml"]).is_err());
    }
}
