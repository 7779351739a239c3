//! Memory hints for the state's slot arrays: with `snapshot/priority.rs`, the engine's only
//! `unsafe` code, kept to two calls that change no data, each for a measured reason
//! (`notes/decisions/state-store.md`).
//!
//! - [`prefetch`]: the apply loop names the records of commands a few places ahead of the one it
//!   executes, so that their cache misses overlap with execution.
//! - [`advise_huge_pages`]: random access over a 2,000,000-account table misses the TLB on
//!   nearly every lookup with 4 KiB pages; on a virtual machine each miss is a two-level page
//!   walk. Asking for 2 MiB pages cut a transfer from about 185 to 155 ns here.
#![allow(unsafe_code)]

/// Bytes of one transparent huge page on x86_64 and aarch64 Linux.
const HUGE_PAGE_BYTES: usize = 2 * 1024 * 1024;

/// Asks the CPU to bring the cache line holding the start of `item` into all cache levels.
#[inline(always)]
pub(crate) fn prefetch<T>(item: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` is a hint: it never faults, never writes and its result is never
    // read. Its only requirement, SSE, belongs to the x86_64 baseline that every x86_64 target
    // enables, so calling it from code compiled without an explicit `target_feature` is sound.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>((item as *const T).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::hint::black_box(item);
}

/// Asks Linux to back the whole 2 MiB pages inside `buffer`'s allocation with huge pages. Call
/// it before the memory is first touched. Advice only: failure (no THP support) changes nothing.
pub(crate) fn advise_huge_pages<T>(buffer: &Vec<T>) {
    let bytes = buffer.capacity() * size_of::<T>();
    let start = buffer.as_ptr() as usize;
    let aligned_start = start.next_multiple_of(HUGE_PAGE_BYTES);
    let aligned_end = (start + bytes) / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES;
    if aligned_end <= aligned_start {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: the range lies inside `buffer`'s own allocation, which stays alive for the call.
    // MADV_HUGEPAGE changes how the kernel backs those pages, never their contents or mapping,
    // so no reference into the buffer can observe it. The return value is advice feedback only.
    unsafe {
        libc::madvise(
            aligned_start as *mut libc::c_void,
            aligned_end - aligned_start,
            libc::MADV_HUGEPAGE,
        );
    }
}

#[cfg(test)]
mod tests {
    /// Proves the hints are pure: contents are unchanged after prefetching every element and
    /// advising a buffer large enough to hold huge pages, before and after it is filled.
    #[test]
    fn hints_change_nothing() {
        let values: Vec<u64> = (0..1024).collect();
        for value in &values {
            super::prefetch(value);
        }
        super::prefetch(&values);
        assert_eq!(values, (0..1024).collect::<Vec<u64>>());

        let mut big: Vec<u64> = Vec::with_capacity(3 * super::HUGE_PAGE_BYTES / 8);
        super::advise_huge_pages(&big);
        big.extend(0..big.capacity() as u64);
        super::advise_huge_pages(&big);
        assert!(big.iter().enumerate().all(|(i, v)| *v == i as u64));
    }
}
