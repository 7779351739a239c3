//! The snapshot writer's scheduling priority: it runs at the lowest priority, so that on a
//! busy machine a node's commit path (event loop, WAL) takes the CPU first whenever it is
//! ready, and the writer uses what is left. With the writer at normal priority, each
//! persisted snapshot (encoding, hashing and writing the whole state) stretched the
//! replies that waited behind it: p99 went from 0.56 to 2.1 ms in `runner local` on two
//! cores (`notes/benchmarks.md`). One call, beside `state/memory.rs` the engine's only
//! `unsafe` code.
#![allow(unsafe_code)]

/// Niceness of the snapshot writer thread (19: the lowest priority).
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
