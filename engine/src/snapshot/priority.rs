//! The snapshot writer's scheduling priority: it runs at a lower priority, so that on a
//! busy machine a node's commit path (event loop, WAL) takes the CPU first whenever it is
//! ready, and the writer mostly uses what is left. With the writer at normal priority, each
//! persisted snapshot (encoding, hashing and writing the whole state) stretched the
//! replies that waited behind it: p99 went from 0.56 to 2.1 ms in `runner local` on two
//! cores (`notes/benchmarks.md`). One call, beside `state/memory.rs` the engine's only
//! `unsafe` code.
#![allow(unsafe_code)]

/// Niceness of the snapshot writer thread (19 is the lowest priority; at 19 a busy leader's
/// writer starved on two cores and its log was never truncated).
pub const WRITER_NICENESS: i32 = 10;

/// Lowers the calling thread's priority to [`WRITER_NICENESS`]. Advice only: failure changes
/// nothing but timing.
pub(crate) fn lower_current_thread() {
    #[cfg(target_os = "linux")]
    // SAFETY: `setpriority` takes plain integers and touches no memory of ours. On Linux the
    // nice value belongs to each thread, and `who = 0` names the calling thread only.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, WRITER_NICENESS);
    }
}
