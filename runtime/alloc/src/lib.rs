//! The allocator of Reel's processes: mimalloc instead of the system's malloc.
//!
//! The compiler, the language server and a replay allocate and free millions of small objects,
//! many of them freed on another thread than the one that made them; glibc's malloc spent about
//! a quarter of a fork check there (`bench/README.md`, session 12). Linking this crate makes
//! mimalloc the process's allocator; [`tune`], called first thing in `main`, keeps what the
//! process holds about as small as glibc's. Arenas are committed as they are used, not at once
//! (`MI_DEFAULT_ARENA_EAGER_COMMIT=0`, set for the C build in `.cargo/config.toml`, since the
//! first arena exists before `main` runs), and the main thread's heap is not freed page by page
//! when the process exits (`MI_SKIP_COLLECT_ON_EXIT`, there too).

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's option `mi_option_purge_delay` (its number in `mi_option_e` of the v3
/// `mimalloc.h` that `libmimalloc-sys` builds; the Rust binding does not name it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed memory waits before it goes back to the system, in milliseconds.
///
/// mimalloc v3 waits a second: a 200,000-call `foreach` then peaked at 142 MB instead of glibc's
/// 119 MB, and a 1,000,000-call one passed its 200 MB aim. At once (0) kept glibc's peaks but
/// cost replays about a tenth of their speed in madvise calls; 10 ms (mimalloc v2's default)
/// keeps the peaks within a few MB of glibc's (28 against 26 MB for a 1,000-step `reel run`, 119
/// against 117 MB for the `foreach`) at mimalloc's speed.
const PURGE_DELAY_MS: std::ffi::c_long = 10;

/// Returns freed memory to the system after [`PURGE_DELAY_MS`] rather than a second. Call it
/// before the process starts other threads.
pub fn tune() {
    // SAFETY: a setter of one of mimalloc's global options, with a valid option and value.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) }
}

/// The purge delay in force, in milliseconds (for the test that [`tune`] took effect).
pub fn purge_delay() -> std::ffi::c_long {
    // SAFETY: a getter of one of mimalloc's global options.
    unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuning_returns_freed_memory_sooner() {
        // mimalloc v3's default (1,000 ms), read through the option's number: so the number
        // names the option this crate means.
        assert_eq!(purge_delay(), 1000);
        tune();
        assert_eq!(purge_delay(), PURGE_DELAY_MS);
        let v: Vec<u8> = vec![1; 1 << 20];
        assert_eq!(v.iter().map(|&b| u64::from(b)).sum::<u64>(), 1 << 20);
    }
}
