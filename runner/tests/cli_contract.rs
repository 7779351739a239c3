//! The command line's contract with scripts, on real `runner` processes: the exit-code table
//! (`notes/operations.md`, "Exit codes"; `engine::cli::Exit`), the client's refusals as JSON
//! values, `--timeout`, the environment variables, completions and man pages, and JSON logs
//! in which every line on standard error is JSON.

mod common;

use common::{Nodes, WAIT, runtime, start_cluster, three_up_with_a_leader, write_cluster_file};
use engine::cli::Exit;
use engine::node::ClusterFile;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Time a command given `--timeout 1` may take in all before the test calls it hung: the
/// timeout, a registration's retries and a debug build's start.
const TIMEOUT_BOUND: Duration = Duration::from_secs(15);

/// What a finished `runner` run left.
#[derive(Debug)]
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Ran {
    /// The exit code, as the table names it.
    fn exit(&self) -> Option<Exit> {
        let code = self.code?;
        Exit::ALL.into_iter().find(|e| i32::from(e.code()) == code)
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|error| panic!("not one JSON document ({error}): {self:#?}"))
    }
}

/// Runs `runner` with `args` and the environment `env` (nothing inherited of the engine's
/// own variables); fails the test when it runs past [`WAIT`].
fn runner(args: &[&str], env: &[(&str, &Path)]) -> Ran {
    let mut command = Command::new(env!("CARGO_BIN_EXE_runner"));
    command.args(args).stdin(Stdio::null());
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    for variable in ["ENGINE_CLUSTER_FILE", "ENGINE_LOG_FORMAT", "ENGINE_NODE_ID"] {
        command.env_remove(variable);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let started = Instant::now();
    let child = command.spawn().expect("runner starts");
    let pid = child.id();
    let (done, exited) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output()));
    let output = exited.recv_timeout(WAIT).unwrap_or_else(|_| {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        panic!("runner {args:?} did not exit")
    });
    let output = output.unwrap();
    Ran {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        took: started.elapsed(),
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Proves exit 3 for every bad invocation and bad file (clap's own usage errors included,
/// which clap alone would exit 2 for), 0 for `--help` and `--version`, and that the cluster
/// file comes from `ENGINE_CLUSTER_FILE` when `--cluster` is left out.
#[test]
fn bad_invocations_and_bad_files_exit_3() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.toml");
    let garbled = dir.path().join("garbled.toml");
    std::fs::write(&garbled, "cluster_id = [[ not toml").unwrap();
    let usage = |args: &[&str], env: &[(&str, &Path)]| {
        let ran = runner(args, env);
        assert_eq!(ran.exit(), Some(Exit::Usage), "{args:?}: {ran:#?}");
        ran
    };
    let out = dir.path().join("out");
    let commands: [&[&str]; 5] = [
        &["status"],
        &["check"],
        &["node", "--id", "1"],
        &["mode", "verify"],
        &["backup", "--out", path(&out)],
    ];
    for command in commands {
        for file in [&missing, &garbled] {
            let args = command.iter().copied().chain(["--cluster", path(file)]);
            usage(&args.collect::<Vec<_>>(), &[]);
        }
    }
    usage(&["client", "--cluster", path(&garbled), "get", "1"], &[]);
    usage(&["status", "--no-such-option"], &[]);
    usage(
        &["status", "--cluster", path(&garbled), "--timeout", "0"],
        &[],
    );
    usage(
        &["client", "--cluster", path(&garbled), "transfer", "1"],
        &[],
    );
    usage(
        &["status", "--cluster", path(&garbled), "--output", "yaml"],
        &[],
    );
    usage(&[], &[]);
    // A capacity below the Bank's empty tables: `recover` says a start would refuse it (1), and
    // names both numbers; nothing panics.
    let tiny = runner(
        &[
            "recover",
            "--data-dir",
            path(dir.path()),
            "--capacity-bytes",
            "10",
        ],
        &[],
    );
    assert_eq!(tiny.exit(), Some(Exit::Negative), "{tiny:#?}");
    assert!(
        tiny.stderr
            .contains("capacity of 10 bytes is below the 1024 bytes"),
        "{tiny:#?}"
    );
    let from_env = usage(&["status"], &[("ENGINE_CLUSTER_FILE", &missing)]);
    assert!(from_env.stderr.contains("missing.toml"), "{from_env:#?}");
    for asked in [&["--help"][..], &["--version"], &["status", "--help"]] {
        let ran = runner(asked, &[]);
        assert_eq!(ran.exit(), Some(Exit::Success), "{asked:?}: {ran:#?}");
        assert!(!ran.stdout.is_empty());
    }
}

/// Proves `status` and `client` exit 2 within their `--timeout` when nothing listens at the
/// cluster file's addresses, and `status --output json` still prints one JSON document.
#[test]
fn nothing_listening_exits_2_within_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, _) = write_cluster_file(dir.path(), |_| {});
    let status = runner(
        &[
            "status",
            "--cluster",
            path(&cluster),
            "--timeout",
            "1",
            "--json",
        ],
        &[],
    );
    assert_eq!(status.exit(), Some(Exit::Unreachable), "{status:#?}");
    assert!(status.took < TIMEOUT_BOUND, "{status:#?}");
    assert_eq!(status.json()["healthy"], false);
    let client = runner(
        &[
            "client",
            "--cluster",
            path(&cluster),
            "--timeout",
            "1",
            "get",
            "1",
        ],
        &[],
    );
    assert_eq!(client.exit(), Some(Exit::Unreachable), "{client:#?}");
    assert!(client.took < TIMEOUT_BOUND, "{client:#?}");
}

/// Proves, on a running cluster: `status` exits 0 when healthy (the cluster file from the
/// environment); a refused Bank command exits 1 with the Bank's error as a JSON value (and 0
/// with `--allow-refused`); a cluster that refuses the credential exits 4; a node down makes
/// `status` exit 1 (degraded), not 2.
#[test]
fn a_running_cluster_answers_with_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, _config) = start_cluster(dir.path(), |_| {});
    let cluster = nodes.cluster_file.clone();
    let env = [("ENGINE_CLUSTER_FILE", cluster.as_path())];
    let healthy = runner(&["status", "--wait", "60", "--output", "json"], &env);
    assert_eq!(healthy.exit(), Some(Exit::Success), "{healthy:#?}");
    assert_eq!(healthy.json()["healthy"], true);
    // Each node tells its build: this binary's version and commit, one build throughout.
    let commit = std::process::Command::new(env!("CARGO_BIN_EXE_runner"))
        .arg("--version")
        .output()
        .unwrap();
    let version = String::from_utf8(commit.stdout).unwrap();
    assert_eq!(healthy.json()["mixed_builds"], false);
    for node in healthy.json()["nodes"].as_array().unwrap() {
        let build = &node["build"];
        assert_eq!(build["version"], env!("CARGO_PKG_VERSION"), "{node}");
        let commit = build["commit"].as_str().unwrap();
        assert!(
            version.contains(&format!("(commit {commit};")),
            "{version} / {node}"
        );
        assert_eq!(build["formats"], engine::formats::describe(), "{node}");
    }
    let table = runner(&["status", "--output", "table"], &env);
    assert!(table.stdout.contains(" build "), "{table:#?}");
    let opened = runner(&["client", "open", "7", "--balance", "100"], &env);
    assert_eq!(opened.exit(), Some(Exit::Success), "{opened:#?}");
    assert_eq!(opened.json()["output"]["balance"], 100);
    let refused = runner(&["client", "transfer", "8", "7", "10"], &env);
    assert_eq!(refused.exit(), Some(Exit::Negative), "{refused:#?}");
    let outcome = refused.json();
    assert_eq!(outcome["outcome"], "failed");
    assert_eq!(
        outcome["error"],
        serde_json::json!({ "AccountNotFound": 8 })
    );
    assert!(
        outcome["message"]
            .as_str()
            .is_some_and(|m| m.contains("not found"))
    );
    let allowed = runner(
        &["client", "--allow-refused", "transfer", "8", "7", "10"],
        &env,
    );
    assert_eq!(allowed.exit(), Some(Exit::Success), "{allowed:#?}");
    assert_eq!(allowed.json()["outcome"], "failed");
    fixed_ids_and_convergence(&env);
    let mut other = ClusterFile::parse(&cluster).unwrap();
    other.cluster_id += 1;
    let other_path = dir.path().join("other.toml");
    other.write(&other_path).unwrap();
    let wrong = runner(&["status", "--cluster", path(&other_path), "--json"], &[]);
    assert_eq!(wrong.exit(), Some(Exit::Refused), "{wrong:#?}");
    nodes.kill(3);
    let degraded = runner(&["status", "--timeout", "1", "--json"], &env);
    assert_eq!(degraded.exit(), Some(Exit::Negative), "{degraded:#?}");
    assert_eq!(degraded.json()["healthy"], false);
}

/// A fixed client id goes on where its session stood: the second run sends its request 2
/// (numbering afresh would send request 1 again with another command: refused as reused);
/// `status --converged` is healthy once every node applied the newest commit with one hash.
fn fixed_ids_and_convergence(env: &[(&str, &Path)]) {
    for amount in ["1", "2"] {
        let args = ["client", "--client-id", "0x2a", "deposit", "7", amount];
        let fixed = runner(&args, env);
        assert_eq!(fixed.exit(), Some(Exit::Success), "{fixed:#?}");
    }
    let read = runner(&["client", "--client-id", "42", "get", "7"], env);
    assert_eq!(read.json()["output"]["balance"], 103, "{read:#?}");
    let bad_id = runner(&["client", "--client-id", "seven", "get", "7"], env);
    assert_eq!(bad_id.exit(), Some(Exit::Usage), "{bad_id:#?}");
    keyed_commands_run_once(env);
    // --converged: healthy once every node applied the newest commit with one hash.
    let still = runner(&["status", "--wait", "60", "--converged", "--json"], env);
    assert_eq!(still.exit(), Some(Exit::Success), "{still:#?}");
    let still = still.json();
    assert_eq!(still["converged"], true);
    let listed = still["nodes"].as_array().unwrap();
    let at = |key: &str| -> Vec<String> { listed.iter().map(|n| n[key].to_string()).collect() };
    for key in ["applied_index", "state_hash"] {
        let values = at(key);
        assert!(values.windows(2).all(|w| w[0] == w[1]), "{key}: {values:?}");
    }
}

/// A command sent with `--key` runs once for the key: sent again it is answered with its
/// first outcome, the same key with another command runs nothing (exit 4, refused), and
/// `--key` with `--client-id` is a usage error.
fn keyed_commands_run_once(env: &[(&str, &Path)]) {
    let args = ["client", "--key", "order-4711", "deposit", "7", "10"];
    let first = runner(&args, env);
    assert_eq!(first.exit(), Some(Exit::Success), "{first:#?}");
    let again = runner(&args, env);
    assert_eq!(again.json(), first.json(), "the first outcome again");
    let other = runner(
        &["client", "--key", "order-4711", "deposit", "7", "11"],
        env,
    );
    assert_eq!(other.exit(), Some(Exit::Refused), "{other:#?}");
    assert!(
        other.stderr.contains("used before with other commands"),
        "{other:#?}"
    );
    let read = runner(&["client", "get", "7"], env);
    assert_eq!(
        read.json()["output"]["balance"],
        113,
        "the keyed deposit ran once"
    );
    let both = ["client", "--key", "k", "--client-id", "42", "get", "7"];
    assert_eq!(runner(&both, env).exit(), Some(Exit::Usage));
    let spaced = runner(&["client", "--key", "two words", "get", "7"], env);
    assert_eq!(spaced.exit(), Some(Exit::Usage), "{spaced:#?}");
}

/// Proves `completions` prints a script for each shell that names real commands, and `man`
/// writes a page for the binary and one per command.
#[test]
fn completions_and_man_pages_describe_the_commands() {
    for shell in ["bash", "zsh", "fish"] {
        let ran = runner(&["completions", shell], &[]);
        assert_eq!(ran.exit(), Some(Exit::Success), "{ran:#?}");
        for word in ["runner", "status", "client", "timeout", "allow-refused"] {
            assert!(ran.stdout.contains(word), "{shell} lacks {word}");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man");
    let ran = runner(&["man", "--out", path(&out)], &[]);
    assert_eq!(ran.exit(), Some(Exit::Success), "{ran:#?}");
    let page = std::fs::read_to_string(out.join("runner.1")).unwrap();
    assert!(page.contains(".TH") && page.contains("status"), "{page}");
    let status = std::fs::read_to_string(out.join("runner-status.1")).unwrap();
    assert!(status.contains("timeout"), "{status}");
}

/// Every line of `text` parsed as a JSON log line with a level and a timestamp.
fn json_lines(what: &str, text: &str) -> Vec<serde_json::Value> {
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("{what}: not JSON ({error}): {line}"));
            assert!(value["level"].is_string(), "{what}: no level: {line}");
            assert!(value["timestamp"].is_string(), "{what}: no time: {line}");
            value
        })
        .collect();
    assert!(!lines.is_empty(), "{what} logged nothing");
    lines
}

/// The first line whose message is `message`.
fn line_of<'a>(lines: &'a [serde_json::Value], message: &str) -> Option<&'a serde_json::Value> {
    lines.iter().find(|l| l["fields"]["message"] == message)
}

/// Polls `check` on node `id`'s log until it holds; fails after [`WAIT`].
fn until_logged(nodes: &Nodes, id: u8, what: &str, check: impl Fn(&str) -> bool) {
    let started = Instant::now();
    while !check(&nodes.log(id)) {
        assert!(started.elapsed() < WAIT, "node {id} never logged {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Proves that with `--log-format json` every line on standard error is JSON with a level
/// and a timestamp: three nodes' starts (the start line with the version), a refusal they
/// log, a fatal stop (a second process for node 1, and a bad cluster file: the error goes
/// through tracing, with its exit code) and a SIGTERM (the stop line, with the version).
#[test]
fn with_json_logs_every_stderr_line_is_json() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, config) = write_cluster_file(dir.path(), |_| {});
    let mut nodes = Nodes::new(dir.path(), cluster.clone());
    for id in 1..=3 {
        nodes.start_with(id, &["--log-format", "json"]);
    }
    runtime().block_on(three_up_with_a_leader(&config));
    let version = env!("CARGO_PKG_VERSION");
    let mut other = ClusterFile::parse(&cluster).unwrap();
    other.cluster_id += 1;
    let other_path = dir.path().join("other.toml");
    other.write(&other_path).unwrap();
    let wrong = runner(
        &["status", "--cluster", path(&other_path), "--timeout", "2"],
        &[],
    );
    assert_eq!(wrong.exit(), Some(Exit::Refused), "{wrong:#?}");
    until_logged(&nodes, 1, "the refusal", |log| log.contains("refused"));
    let second = runner(
        &[
            "--log-format",
            "json",
            "node",
            "--cluster",
            path(&cluster),
            "--id",
            "1",
        ],
        &[],
    );
    assert_eq!(second.exit(), Some(Exit::Failed), "{second:#?}");
    let lines = json_lines("the second node 1", &second.stderr);
    let fatal = lines
        .iter()
        .find(|l| l["level"] == "ERROR")
        .expect("an error line");
    assert_eq!(fatal["fields"]["exit"], Exit::Failed.code(), "{fatal}");
    let garbled = dir.path().join("garbled.toml");
    std::fs::write(&garbled, "nodes = 3 [[").unwrap();
    let bad = runner(
        &["node", "--cluster", path(&garbled), "--id", "1"],
        &[("ENGINE_LOG_FORMAT", Path::new("json"))],
    );
    assert_eq!(bad.exit(), Some(Exit::Usage), "{bad:#?}");
    json_lines("a node with a bad file", &bad.stderr);
    let pid = nodes.children[&2].id();
    let term = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    assert!(term.unwrap().success());
    assert!(nodes.wait_exit(2).success(), "SIGTERM is a clean stop");
    let stopped = json_lines("node 2", &nodes.log(2));
    let started = line_of(&stopped, "node started").expect("a start line");
    assert_eq!(started["fields"]["version"], version, "{started}");
    let stopping = line_of(&stopped, "node stopping").expect("a stop line");
    assert_eq!(stopping["fields"]["signal"], "SIGTERM", "{stopping}");
    assert_eq!(stopping["fields"]["version"], version, "{stopping}");
    assert!(line_of(&stopped, "node stopped").is_some());
    let refusals = json_lines("node 1", &nodes.log(1));
    assert!(refusals.iter().any(|l| l["level"] == "WARN"));
    json_lines("node 3", &nodes.log(3));
}

/// Proves `client-file` takes the output switch: with `--json` its one JSON document says
/// which file it wrote and that no peer or operator secret is in it; the table form is a
/// sentence.
#[test]
fn client_file_reports_in_either_form() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, _) = write_cluster_file(dir.path(), |_| {});
    let out = dir.path().join("client.toml");
    let json = runner(
        &[
            "client-file",
            "--cluster",
            path(&cluster),
            "--out",
            path(&out),
            "--json",
        ],
        &[],
    );
    assert_eq!(json.exit(), Some(Exit::Success), "{json:#?}");
    let said = json.json();
    assert_eq!(said["file"], path(&out));
    assert_eq!(said["kind"], "client");
    assert_eq!(
        (said["peer_secret"].clone(), said["nodes"].clone()),
        (false.into(), 3.into())
    );
    let again = dir.path().join("again.toml");
    let table = runner(
        &[
            "client-file",
            "--cluster",
            path(&cluster),
            "--out",
            path(&again),
        ],
        &[],
    );
    assert_eq!(table.exit(), Some(Exit::Success), "{table:#?}");
    assert!(
        table.stdout.contains("no peer or operator secret"),
        "{table:#?}"
    );
}

/// The commands a help text lists under its "Commands:" heading (clap's own `help` left out).
fn listed_commands(help: &str) -> Vec<String> {
    let Some(start) = help.find("\nCommands:\n") else {
        return Vec::new();
    };
    help[start + "\nCommands:\n".len()..]
        .lines()
        .take_while(|line| line.starts_with("  "))
        .filter(|line| !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next().map(str::to_string))
        .filter(|name| name != "help")
        .collect()
}

/// Where a help text states an exit code without the table's name for it: every "exit"
/// followed closely by a digit must have that code's [`Exit::name`] within a few words.
fn unnamed_exit_codes(text: &str) -> Vec<String> {
    const NEAR: usize = 48;
    let chars: Vec<char> = text.to_lowercase().chars().collect();
    let mut found = Vec::new();
    for at in 0..chars.len() {
        if !chars[at..].starts_with(&['e', 'x', 'i', 't']) {
            continue;
        }
        let after = &chars[at..(at + 16).min(chars.len())];
        let Some(code) = after.iter().find_map(|c| c.to_digit(10)) else {
            continue;
        };
        let window: String = chars[at.saturating_sub(NEAR)..(at + NEAR).min(chars.len())]
            .iter()
            .collect();
        let named = Exit::ALL
            .into_iter()
            .find(|exit| u32::from(exit.code()) == code)
            .is_some_and(|exit| window.contains(exit.name()));
        if !named {
            found.push(window.replace('\n', " "));
        }
    }
    found
}

/// Proves every command's help, `runner`'s and those it forwards to `runner-harness`, ends
/// with the exit codes' table as `engine::cli::Exit` has it, and names no exit code
/// elsewhere without the table's name for it (a help that said "exit 1" where the command
/// exits 3 fails here).
#[test]
fn every_help_ends_with_the_exit_table_and_agrees_with_it() {
    let table = engine::cli::exit_codes_help();
    let mut pending: Vec<Vec<String>> = vec![Vec::new()];
    let mut walked = 0;
    while let Some(path) = pending.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let ran = runner(&args, &[]);
        assert_eq!(ran.exit(), Some(Exit::Success), "{args:?}: {ran:#?}");
        let help = ran.stdout.trim_end();
        assert!(
            help.ends_with(&table),
            "{args:?} does not end with the table:\n{help}"
        );
        let body = &help[..help.len() - table.len()];
        let unnamed = unnamed_exit_codes(body);
        assert!(
            unnamed.is_empty(),
            "{args:?} states exit codes off the table: {unnamed:#?}"
        );
        for command in listed_commands(body) {
            let mut deeper = path.clone();
            deeper.push(command);
            pending.push(deeper);
        }
        walked += 1;
    }
    assert!(
        walked > 20,
        "only {walked} help texts: the walk lost the commands"
    );
}

/// Runs `runner COMMAND --cluster FILE [ARGS]` with its standard output closed before it
/// writes anything (every write meets a closed pipe, whatever the timing); its exit code and
/// standard error.
fn with_stdout_closed(command: &str, file: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args([command, "--cluster", path(file)])
        .args(args)
        .env_remove("ENGINE_CLUSTER_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runner starts");
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("runner ends");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), stderr)
}

/// Proves a reader that closes standard output early ends the command quietly, with the
/// code the command would have had anyway: `check | head -1` on a good file exits 0 with
/// nothing on standard error (it used to panic with "Broken pipe" and exit 101), on a bad
/// file 3; `status` with no node answering, 2.
#[test]
fn a_closed_standard_output_ends_the_command_quietly_with_its_own_code() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, _) = write_cluster_file(dir.path(), |_| {});
    let (code, stderr) = with_stdout_closed("check", &cluster, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.is_empty(), "not quiet: {stderr}");
    let mut bad = ClusterFile::parse(&cluster).unwrap();
    bad.nodes.truncate(1);
    bad.nodes.push(bad.nodes[0].clone());
    let bad_file = dir.path().join("duplicate.toml");
    bad.write(&bad_file).unwrap();
    let (code, stderr) = with_stdout_closed("check", &bad_file, &[]);
    assert_eq!(code, Some(i32::from(Exit::Usage.code())), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // status prints its table of nodes (none answering here) and exits 2, unreachable.
    let (code, stderr) = with_stdout_closed("status", &cluster, &["--timeout", "1"]);
    assert_eq!(code, Some(i32::from(Exit::Unreachable.code())), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
