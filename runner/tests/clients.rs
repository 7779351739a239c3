//! The packages of `clients/` installed as a user installs them, each into a place of its own
//! under a temporary directory (Python: a virtual environment and `pip install`; Node.js: a
//! project and `npm install` of the packed package), then their own test suites run by those
//! interpreters against a real three-node cluster and a real gateway.
//!
//! Nothing here is optional: a missing interpreter or tool fails the test and names what
//! `.ci/run` installs. pip's isolated build fetches the build backend (setuptools) from PyPI;
//! where PyPI cannot be reached the test fails and says so. npm installs offline: the tarball
//! is the whole package (it has no dependencies).

mod common;

use common::gateway::Gateway;
use common::start_cluster;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Tests the Python suite holds (`tests/test_gateway.py`, `tests/test_retries.py`): fewer ran
/// means some were not found.
const PYTHON_TESTS_MIN: usize = 14;
/// Tests the Node.js suite holds (`test/gateway.test.js`, `test/retries.test.js`).
const NODE_TESTS_MIN: usize = 15;
/// The Node.js suite's files, run from the project the package was installed into.
const NODE_TEST_FILES: [&str; 2] = ["test/gateway.test.js", "test/retries.test.js"];
/// What those tests import beside the package.
const NODE_TEST_SUPPORT: &str = "test/support.js";

/// Proves the Python package installs with pip into a new virtual environment and passes its
/// own tests there, against a real cluster and gateway.
#[test]
fn the_python_package_installs_and_passes_its_tests() {
    require("python3", "apt-get install python3");
    let dir = tempfile::tempdir().unwrap();
    let venv = dir.path().join("venv");
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        "a virtual environment (on Debian, .ci/run installs python3-venv for it)",
    );
    let python = venv.join("bin/python");
    // pip builds in the source tree (build/, *.egg-info): a copy keeps the checkout clean.
    let source = dir.path().join("python");
    copy_tree(&package("python"), &source);
    run(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg(&source),
        "pip install of clients/python (its isolated build fetches setuptools from PyPI: \
         is PyPI reachable from here?)",
    );
    let imported = run(
        Command::new(&python)
            .args(["-c", "import enginebank; print(enginebank.__file__)"])
            .current_dir(&source),
        "import enginebank",
    );
    assert!(
        imported.contains("site-packages"),
        "the tests would import the source, not the installed package: {imported}"
    );
    let (nodes, _) = start_cluster(dir.path(), |_| {});
    let gateway = Gateway::start(dir.path(), &nodes.cluster_file, "gateway");
    let output = run(
        Command::new(&python)
            .args(["-m", "unittest", "-v"])
            .current_dir(&source)
            .env("GATEWAY_URL", format!("http://{}", gateway.address))
            .env("GATEWAY_TOKEN_FILE", &gateway.token_file)
            .env("PYTHONDONTWRITEBYTECODE", "1"),
        "the Python package's tests",
    );
    println!("{output}");
    let ran = count_after(&output, "Ran");
    assert!(
        ran >= PYTHON_TESTS_MIN,
        "{ran} tests ran, not {PYTHON_TESTS_MIN}:\n{output}"
    );
}

/// Proves the Node.js package, packed and installed with npm into a new project, passes its
/// own tests there, against a real cluster and gateway.
#[test]
fn the_node_package_installs_and_passes_its_tests() {
    require("node", "apt-get install nodejs");
    require(
        "npm",
        "apt-get install npm: Debian's nodejs comes without it",
    );
    let dir = tempfile::tempdir().unwrap();
    run(
        Command::new("npm")
            .args(["pack", "--silent", "--pack-destination"])
            .arg(dir.path())
            .arg(package("node")),
        "npm pack of clients/node",
    );
    let tarball = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|item| item.path())
        .find(|path| path.extension().is_some_and(|e| e == "tgz"))
        .expect("npm pack wrote a tarball");
    let project = dir.path().join("project");
    std::fs::create_dir_all(project.join("test")).unwrap();
    let manifest = r#"{"name": "enginebank-tests", "private": true, "type": "module"}"#;
    std::fs::write(project.join("package.json"), manifest).unwrap();
    run(
        Command::new("npm")
            .args([
                "install",
                "--offline",
                "--no-audit",
                "--no-fund",
                "--no-update-notifier",
            ])
            .arg(&tarball)
            .current_dir(&project),
        "npm install of the packed clients/node",
    );
    for file in NODE_TEST_FILES.into_iter().chain([NODE_TEST_SUPPORT]) {
        std::fs::copy(package("node").join(file), project.join(file)).unwrap();
    }
    let (nodes, _) = start_cluster(dir.path(), |_| {});
    let gateway = Gateway::start(dir.path(), &nodes.cluster_file, "gateway");
    let output = run(
        Command::new("node")
            .arg("--test")
            .args(NODE_TEST_FILES)
            .current_dir(&project)
            .env("GATEWAY_URL", format!("http://{}", gateway.address))
            .env("GATEWAY_TOKEN_FILE", &gateway.token_file),
        "the Node.js package's tests",
    );
    println!("{output}");
    let passed = count_after(&output, "pass");
    assert!(
        passed >= NODE_TESTS_MIN,
        "{passed} tests passed, not {NODE_TESTS_MIN}:\n{output}"
    );
}

/// The repository's `clients/NAME`.
fn package(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../clients")
        .join(name)
}

/// Fails unless `program --version` runs, naming what `.ci/run` installs.
fn require(program: &str, install: &str) {
    let runs = Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    assert!(
        runs,
        "{program} is not installed here: .ci/run installs it ({install}); this test never skips"
    );
}

/// Runs `command` and returns its standard output and error; fails with `what` and both
/// unless it exits 0.
fn run(command: &mut Command, what: &str) -> String {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("{what}: {command:?} did not start: {error}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "{what}: {command:?} exited with {}:\n{text}",
        output.status
    );
    text
}

/// Copies the tree at `from` to `to`, without what building or testing leaves in it.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for item in std::fs::read_dir(from).unwrap().flatten() {
        let name = item.file_name();
        let text = name.to_string_lossy();
        let left = ["build", "dist", "node_modules", "__pycache__"].contains(&&*text);
        if left || text.ends_with(".egg-info") {
            continue;
        }
        if item.path().is_dir() {
            copy_tree(&item.path(), &to.join(&name));
        } else {
            std::fs::copy(item.path(), to.join(&name)).unwrap();
        }
    }
}

/// The number after `label` at the start of a summary line (`Ran 14 tests in 2.1s`; node's
/// `# pass 15` or `ℹ pass 15`), or 0 when there is none.
fn count_after(output: &str, label: &str) -> usize {
    output
        .lines()
        .filter_map(|line| {
            let line = line.trim_start_matches(['#', 'ℹ', ' ']);
            line.strip_prefix(label)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .max()
        .unwrap_or(0)
}
