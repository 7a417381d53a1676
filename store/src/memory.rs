//! Memory freed given back to the system when it is known to be done with, and memory
//! fetched into the CPU's caches ahead of its use.
//!
//! The binary's allocator (mimalloc) gives idle memory back to the system only lazily: a
//! page freed is returned a second later, and only when the allocator is next busy. A
//! scheduler taking shards frees most of what it read (the index's messages, each spec's
//! decoding, buffers outgrown while queueing) and then sits quiet until the next fire, so
//! its resident memory stayed near the peak of the load. Given back at once after each
//! shard's load: 254-265 MiB per agent instead of 274-328 MiB with 2,500,000 schedules on
//! four agents (`cronrun bench scale --schedules 2500000`); at 10,000,000, 848-878 MiB
//! instead of 857-917 MiB, and the first start took 66.8 and 69.5 s instead of 74.4 and
//! 79.1 s (docs/benchmarks.md).

#![allow(unsafe_code)]

/// Gives the memory freed so far back to the system. Without mimalloc as the allocator
/// (the tests) it finds nothing to give.
pub fn give_back() {
    // SAFETY: mimalloc's own collection; it may be called from any thread at any time.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// Asks the CPU to bring the `bytes` at `p` into its caches, without waiting for them. A
/// hint: it reads nothing the program sees, and no address can make it fault.
pub fn prefetch<T: ?Sized>(p: *const T, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    for line in (0..bytes).step_by(64) {
        // SAFETY: a prefetch dereferences nothing; any address, valid or not, is allowed.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>().wrapping_add(line))
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, bytes);
}
