//! The process as an operator sees it: CPU, memory, descriptors (read from `/proc` at each
//! scrape), the data directory's filesystem, and the descriptor limit a node raises at start.

use std::path::Path;

/// What a scrape reads of the process and its disk. A figure the system would not give is
/// absent, never a made-up zero.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct ProcessFigures {
    pub(crate) cpu_seconds: Option<f64>,
    pub(crate) resident_bytes: Option<u64>,
    pub(crate) open_fds: Option<u64>,
    pub(crate) max_fds: Option<u64>,
    /// The data directory's filesystem: bytes free to this user, and its size.
    pub(crate) disk: Option<(u64, u64)>,
}

impl ProcessFigures {
    /// Reads them now, with the filesystem of `data_dir`.
    pub(crate) fn read(data_dir: &Path) -> Self {
        let stat = std::fs::read_to_string("/proc/self/stat").ok();
        let statm = std::fs::read_to_string("/proc/self/statm").ok();
        ProcessFigures {
            cpu_seconds: stat.as_deref().and_then(cpu_seconds),
            resident_bytes: statm.as_deref().and_then(resident_bytes),
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|entries| entries.count() as u64),
            max_fds: descriptor_limit().current,
            disk: rustix::fs::statvfs(data_dir).ok().map(|vfs| {
                let unit = vfs.f_frsize.max(1);
                (vfs.f_bavail * unit, vfs.f_blocks * unit)
            }),
        }
    }
}

/// User and system time from `/proc/self/stat` (fields 14 and 15, after the command name in
/// parentheses, which may itself hold spaces).
fn cpu_seconds(stat: &str) -> Option<f64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    let ticks = rustix::param::clock_ticks_per_second().max(1);
    Some((user + system) as f64 / ticks as f64)
}

/// Resident pages from `/proc/self/statm` (its second field), in bytes.
fn resident_bytes(statm: &str) -> Option<u64> {
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * rustix::param::page_size() as u64)
}

/// The soft and hard limits on open descriptors (`None`: unlimited).
pub struct DescriptorLimit {
    /// The soft limit, the one enforced.
    pub current: Option<u64>,
    /// The hard limit, up to which a process may raise its soft one.
    pub maximum: Option<u64>,
}

fn descriptor_limit() -> DescriptorLimit {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    DescriptorLimit {
        current: limit.current,
        maximum: limit.maximum,
    }
}

/// Raises the soft limit on open descriptors to the hard one, so that a stock soft limit of
/// 1,024 does not run out before the node's own connection caps; logs what it got.
pub fn raise_descriptor_limit() -> DescriptorLimit {
    let before = descriptor_limit();
    if before.current != before.maximum {
        let raised = rustix::process::Rlimit {
            current: before.maximum,
            maximum: before.maximum,
        };
        if let Err(error) = rustix::process::setrlimit(rustix::process::Resource::Nofile, raised) {
            tracing::warn!(%error, soft = ?before.current, hard = ?before.maximum,
                "could not raise the open-descriptor limit");
        }
    }
    let after = descriptor_limit();
    tracing::info!(
        soft = after.current.map_or("unlimited".into(), |n| n.to_string()),
        hard = after.maximum.map_or("unlimited".into(), |n| n.to_string()),
        was = before.current.map_or("unlimited".into(), |n| n.to_string()),
        "open-descriptor limit"
    );
    after
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the figures are read from this very process: it has used some CPU, holds some
    /// memory and descriptors, and its disk has a size.
    #[test]
    fn the_process_figures_are_this_processes() {
        let figures = ProcessFigures::read(Path::new("."));
        assert!(figures.cpu_seconds.is_some_and(|s| s >= 0.0));
        assert!(figures.resident_bytes.is_some_and(|b| b > 1 << 20));
        assert!(figures.open_fds.is_some_and(|n| n >= 3));
        let (free, size) = figures
            .disk
            .expect("the working directory has a filesystem");
        assert!(free <= size && size > 0);
        // A command name with spaces and parentheses does not shift the fields.
        let stat = "42 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 300 200 0 0";
        let ticks = rustix::param::clock_ticks_per_second() as f64;
        assert_eq!(cpu_seconds(stat), Some(500.0 / ticks));
    }

    /// Proves the soft limit ends at the hard one (or stays where it was, unlimited).
    #[test]
    fn the_soft_descriptor_limit_is_raised_to_the_hard_one() {
        let after = raise_descriptor_limit();
        assert_eq!(after.current, after.maximum);
    }
}
