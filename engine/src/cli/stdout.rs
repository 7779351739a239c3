//! Standard output of every command, for a reader that may stop reading. `println!` panics
//! when the reader has gone (`runner check | head -1`: "failed printing to stdout: Broken
//! pipe", exit 101). Here a closed pipe is what a reader is allowed to do: what is left to
//! print is dropped quietly, and the command ends as it would have, with its own exit code
//! (`notes/decisions/cli-contract.md`). Any other write error (a full disk behind a
//! redirect) is remembered, and the command then ends with [`super::Exit::Failed`].

use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once the reader of standard output has gone: nothing more is written.
static CLOSED: AtomicBool = AtomicBool::new(false);
/// The first write error other than a closed pipe, reported when the command ends.
static FAILED: Mutex<Option<std::io::ErrorKind>> = Mutex::new(None);

/// Writes `text` to standard output and flushes it. A closed pipe stops all further output
/// and is otherwise ignored; another error is kept for [`failure`].
pub fn write(text: &[u8]) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    let written = out.write_all(text).and_then(|()| out.flush());
    match written {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
            CLOSED.store(true, Ordering::Relaxed);
        }
        Err(error) => {
            CLOSED.store(true, Ordering::Relaxed);
            let mut failed = FAILED
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            failed.get_or_insert(error.kind());
        }
    }
}

/// Writes `arguments` and a newline: what [`crate::outln`] calls.
pub fn line(arguments: std::fmt::Arguments<'_>) {
    let mut text = std::fmt::format(arguments);
    text.push('\n');
    write(text.as_bytes());
}

/// Writes `arguments` without a newline: what [`crate::out`] calls.
pub fn text(arguments: std::fmt::Arguments<'_>) {
    write(std::fmt::format(arguments).as_bytes());
}

/// True once the reader of standard output has gone (or writing to it failed): a command
/// that only prints may stop early.
pub fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// The write error, other than a closed pipe, that lost some of the output, if any.
pub fn failure() -> Option<std::io::ErrorKind> {
    *FAILED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `println!` for a command's result: standard output through [`line()`], so that a reader
/// that stops early ends nothing but the output.
#[macro_export]
macro_rules! outln {
    () => {
        $crate::cli::stdout::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::cli::stdout::line(format_args!($($arg)*))
    };
}

/// `print!` for a command's result, through [`text()`].
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::stdout::text(format_args!($($arg)*))
    };
}
