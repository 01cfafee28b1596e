//! Handing the allocator's free memory back to the system, after a crowd
//! of peers left or links gave back their buffers (the endpoint's upkeep
//! decides when: `upkeep.rs`).
//!
//! Freeing memory returns it to the allocator, not to the system. With
//! glibc's allocator, `malloc_trim` returns the free pages of every arena
//! but two kinds, which this module returns on the thread that served
//! the crowd:
//!
//! * the free top of the thread's arena: glibc keeps 128 KiB or more of
//!   it, dirty ([`scrub_free_memory`]);
//! * the thread's cache of freed small chunks (tcache), whose chunks lie
//!   scattered over the crowd's pages and pin a page each
//!   ([`flush_thread_cache`]).
//!
//! Pages dirtied after a give-back stay until the next: the upkeep gives
//! back again when links give back buffers. Off glibc (musl) nothing is
//! done; under another global allocator the glibc calls find little to
//! do, and the scrub and the flush cost a few allocations.

/// Hands the allocator's free memory back to the system (module docs),
/// on the thread that calls it: the one that served the crowd. Takes
/// 0.2 to 4 ms, 15 ms after a 60 MiB flood.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(super) fn give_back_memory() {
    // SAFETY: malloc_trim only walks the allocator's own free lists; it
    // takes no pointer and is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
    scrub_free_memory();
    flush_thread_cache();
    // SAFETY: as above.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A block [`scrub_free_memory`] takes: below the 128 KiB from which glibc
/// maps a block of its own, so it comes from the arena.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const SCRUB_BLOCK: usize = 120 << 10;
/// The most [`scrub_free_memory`] takes at once.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const SCRUB_LIMIT: usize = 64 << 20;

/// Takes this thread's arena's free memory in blocks (as much as the
/// allocator says is free, up to [`SCRUB_LIMIT`]), tells the kernel the
/// whole pages inside each are not needed, and frees them again. The last
/// blocks come from the arena's free top, the one free memory
/// `malloc_trim` leaves resident; freeing them together lets glibc shrink
/// the arena. Blocks that come from free chunks `malloc_trim` already
/// released cost one `madvise` each.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn scrub_free_memory() {
    // SAFETY: mallinfo reads the allocator's counters; no pointers.
    let free = unsafe { libc::mallinfo() }.fordblks;
    // `int` counters wrap past 2 GiB: a negative count means "a lot".
    let free = usize::try_from(free)
        .unwrap_or(SCRUB_LIMIT)
        .min(SCRUB_LIMIT);
    // SAFETY: sysconf reads a constant of the system; no pointers.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(0);
    if page == 0 || !page.is_power_of_two() || page > SCRUB_BLOCK / 2 {
        return;
    }
    let mut held: Vec<Vec<u8>> = Vec::with_capacity(free / SCRUB_BLOCK + 1);
    while held.len() * SCRUB_BLOCK < free {
        let mut block: Vec<u8> = Vec::with_capacity(SCRUB_BLOCK);
        let at = block.as_mut_ptr() as usize;
        // Whole pages only, clear of the chunk's header and of the bytes
        // the allocator writes into a chunk when it is freed.
        let start = (at + 64).next_multiple_of(page);
        let end = (at + SCRUB_BLOCK - 64) / page * page;
        if end > start {
            // SAFETY: [start, end) lies inside `block`'s allocation, which
            // this function owns and has not written; MADV_DONTNEED only
            // makes its pages read as zeroes again, which no one reads.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
            }
        }
        held.push(block);
    }
}

/// Empties glibc's cache of this thread's freed small chunks (tcache: 7
/// per size class, 64 classes up to 1,032 bytes) of the chunks a crowd
/// freed last: they lie scattered over the pages the crowd used, and each
/// pins its page (up to 448 pages). For each class, the cached chunks are
/// taken out, as many fresh ones (carved together from free memory) are
/// freed into the cache in their place, and then the old ones go back to
/// the allocator's free lists, where `malloc_trim` returns their pages.
/// The fresh chunks stay cached: about 230 KiB, on pages of their own.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn flush_thread_cache() {
    const CLASSES: usize = 64;
    const PER_CLASS: usize = 7;
    for class in 0..CLASSES {
        let size = 24 + 16 * class;
        let cached: [Vec<u8>; PER_CLASS] = std::array::from_fn(|_| Vec::with_capacity(size));
        let fresh: [Vec<u8>; PER_CLASS] = std::array::from_fn(|_| Vec::with_capacity(size));
        drop(std::hint::black_box(fresh));
        drop(std::hint::black_box(cached));
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(super) fn give_back_memory() {}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    /// Set in the child process that runs a test on its own.
    const CHILD_VAR: &str = "PSMRAIL_GIVE_BACK_CHILD";

    /// Runs `body` in a child process of this test binary (filtered to
    /// exactly `test`), whose allocator no other test's threads share:
    /// their memory would lie among the crowd's.
    fn alone(test: &str, body: impl FnOnce()) {
        if std::env::var_os(CHILD_VAR).is_some() {
            return body();
        }
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_VAR, "1")
            .status()
            .unwrap();
        assert!(status.success(), "{test} failed in its process: {status}");
    }

    /// How many whole pages of `[lo, hi)` are resident (none when the
    /// allocator gave the range back to the system altogether).
    fn resident(lo: usize, hi: usize) -> usize {
        const PAGE: usize = 4096;
        let (lo, hi) = (lo.next_multiple_of(PAGE), hi / PAGE * PAGE);
        if hi <= lo {
            return 0;
        }
        let mut pages = vec![0u8; (hi - lo) / PAGE];
        // SAFETY: mincore only reads the page tables of the page-aligned
        // range and writes one byte per page into `pages`, which has one
        // per page; it fails (ENOMEM) on ranges no longer mapped.
        let rc = unsafe { libc::mincore(lo as *mut libc::c_void, hi - lo, pages.as_mut_ptr()) };
        if rc != 0 {
            return 0;
        }
        pages.iter().filter(|&&p| p & 1 == 1).count()
    }

    fn span<T>(blocks: &[Vec<T>]) -> (usize, usize) {
        let lo = blocks.iter().map(|b| b.as_ptr() as usize).min().unwrap();
        let hi = blocks
            .iter()
            .map(|b| b.as_ptr() as usize + b.capacity() * size_of::<T>())
            .max()
            .unwrap();
        (lo, hi)
    }

    #[test]
    fn the_free_top_a_crowd_dirtied_goes_back() {
        alone(
            "engine::soft::endpoint::give_back::tests::the_free_top_a_crowd_dirtied_goes_back",
            || {
                // A crowd's buffers, written through, then freed: they merge
                // into the arena's top, which glibc keeps 128 KiB of.
                let crowd: Vec<Vec<u8>> = (0..512).map(|_| vec![1u8; 8 << 10]).collect();
                let (lo, hi) = span(&crowd);
                drop(crowd);
                // SAFETY: as in `give_back_memory`.
                unsafe {
                    libc::malloc_trim(0);
                }
                let trimmed = resident(lo, hi);
                scrub_free_memory();
                let scrubbed = resident(lo, hi);
                assert!(
                    scrubbed <= 4,
                    "{scrubbed} pages of the crowd's 4 MiB still resident after the scrub \
                 ({trimmed} after malloc_trim alone)"
                );
            },
        );
    }

    #[test]
    fn small_chunks_a_crowd_freed_last_pin_no_pages() {
        alone(
            "engine::soft::endpoint::give_back::tests::small_chunks_a_crowd_freed_last_pin_no_pages",
            || {
            // Per size class of the cache, 16 records, each on pages of its
            // own between written buffers. The records go last, so the
            // cache keeps 7 of each class, scattered.
            let mut records = Vec::new();
            let mut buffers = Vec::new();
            for class in 0..64 {
                for _ in 0..16 {
                    records.push(vec![1u8; 24 + 16 * class]);
                    buffers.push(vec![1u8; 4 << 10]);
                }
            }
            let (lo, hi) = span(&buffers);
            drop(buffers);
            drop(records);
            give_back_memory();
            let left = resident(lo, hi);
            // The cache's fresh chunks (59 pages) may be carved from the
            // crowd's memory, and the page under each free chunk's header
            // stays; the 448 old ones, a page each, must not stay.
            assert!(
                left <= 200,
                "{left} pages of the crowd's 5 MiB still resident after giving back"
            );
            },
        );
    }
}
