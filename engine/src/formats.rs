//! The versions of what this build speaks, writes and reads: the wire protocol and the files
//! on disk. They are versioned apart from the crates (a release may change code and keep
//! every format), and `--version` shows them, so that an operator can tell which builds can
//! run side by side (`notes/operations.md`, the compatibility table).

/// The wire protocol this build offers first.
pub const PROTOCOL: u16 = net::message::PROTOCOL_VERSION;
/// The oldest wire protocol this build still speaks (to nodes and clients of older builds).
pub const PROTOCOL_OLDEST: u16 = net::message::PROTOCOL_VERSION_OLDEST;
/// The WAL's record format, the digit its records' magic ends in (`WAL1`).
pub const WAL: u16 = 1;
/// The snapshot format this build writes (`SNAPv007`).
pub const SNAPSHOT: u16 = 7;
/// The oldest snapshot format this build reads.
pub const SNAPSHOT_OLDEST: u16 = 5;
/// The delta file's format (`SNAPd001`), which builds before it neither write nor read: they
/// list whole snapshots only, and replay the log, kept from the whole snapshot on.
pub const SNAPSHOT_DELTA: u16 = 1;
/// The apply journal's record format (`JRN2`: with each command's outcome, what the change
/// stream serves).
pub const JOURNAL: u16 = 2;
/// The oldest journal record format this build reads (`JRN1`: outcome fingerprints only).
pub const JOURNAL_OLDEST: u16 = 1;
/// The backup file's format.
pub const BACKUP: u16 = crate::operator::backup::BACKUP_FORMAT_VERSION;

const _: () = assert!(
    PROTOCOL_OLDEST <= PROTOCOL && SNAPSHOT_OLDEST <= SNAPSHOT && JOURNAL_OLDEST <= JOURNAL
);

/// One line naming every version: `protocol 5 (reads 3-5), WAL 1, snapshot 7 (reads 5-7),
/// delta 1, journal 2 (reads 1-2), backup 1`.
pub fn describe() -> String {
    format!(
        "protocol {PROTOCOL} (reads {PROTOCOL_OLDEST}-{PROTOCOL}), WAL {WAL}, \
         snapshot {SNAPSHOT} (reads {SNAPSHOT_OLDEST}-{SNAPSHOT}), delta {SNAPSHOT_DELTA}, \
         journal {JOURNAL} (reads {JOURNAL_OLDEST}-{JOURNAL}), backup {BACKUP}"
    )
}

/// The binary's version and commit, as its `main` named them ([`set_binary`]).
static BINARY: std::sync::OnceLock<(&'static str, &'static str)> = std::sync::OnceLock::new();

/// Names the binary this process runs, for the metrics' `engine_build_info` and the build a
/// node reports to `status`: its version and the commit it was built from (`unknown` when
/// not built from git). A binary calls it once, first thing; later calls change nothing.
pub fn set_binary(version: &'static str, commit: &'static str) {
    let _ = BINARY.set((version, commit));
}

/// The binary's version and commit: as [`set_binary`] named them, else the engine's version
/// and `unknown`.
pub fn binary() -> (&'static str, &'static str) {
    BINARY
        .get()
        .copied()
        .unwrap_or((env!("CARGO_PKG_VERSION"), "unknown"))
}

/// The number a magic's last three ASCII digits spell (`SNAPv007` is 7).
pub(crate) const fn magic_number(magic: &[u8]) -> u16 {
    let n = magic.len();
    digit(magic[n - 3]) * 100 + digit(magic[n - 2]) * 10 + digit(magic[n - 1])
}

/// The value of an ASCII digit.
pub(crate) const fn digit(byte: u8) -> u16 {
    assert!(byte.is_ascii_digit(), "a magic's version is in digits");
    (byte - b'0') as u16
}
