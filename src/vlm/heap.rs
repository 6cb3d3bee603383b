//! How the process heap treats the large, short-lived buffers of a forward pass.
//!
//! Why: every candle op allocates its output, and a vision or prefill pass allocates and frees
//! thousands of 1–32 MB tensors. glibc's malloc returns such blocks to the kernel (its dynamic
//! mmap threshold starts at 128 KiB, and the heap top is trimmed past 128 KiB–64 MiB), so the
//! next allocation faults its pages in again and the kernel zeroes each one: in a `perf record`
//! of `bench vlm --quant q4k` on 2 AVX-512 cores, `clear_page_erms` and the page-fault path took
//! about a third of the samples. Keeping freed memory in the heap (blocks up to 32 MiB served
//! from it, the top trimmed only past 512 MiB) cut vision 10.4 → 8.1 s and prefill 9.9 →
//! 6.7 s in that benchmark (README "VLM speed and memory").
//!
//! Applied when a model first runs ([`keep_freed_pages`], called by `Qwen25Vl::vision_rows` and
//! `Qwen25Vl::prefill`, the two ways into a forward pass: `prefill_after` and decoding only follow
//! a `prefill` in the same process, and the policy is process-wide), not at start-up: loading
//! reads gigabytes of weights in pieces whose transient buffers should go back to the kernel,
//! and setting the policy before load raised peak RSS by 1.6 GB in the same benchmark. glibc
//! only (other C libraries keep their own policy).

/// Blocks up to this size come from the heap (glibc's own ceiling for the threshold).
const MMAP_THRESHOLD: i32 = 32 << 20;
/// Free memory at the heap top beyond this goes back to the kernel.
const TRIM_THRESHOLD: i32 = 512 << 20;

/// Sets the heap policy above once per process; later calls do nothing. Returns whether the C
/// library took both settings (false off glibc, or if glibc refused a value: then its default
/// policy stays, which is only slower).
pub fn keep_freed_pages() -> bool {
    static TAKEN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TAKEN.get_or_init(set)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set() -> bool {
    // SAFETY: mallopt only changes malloc's tunables and is thread-safe in glibc.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set() -> bool {
    false
}

#[cfg(test)]
mod tests {
    /// glibc refuses an mmap threshold above its ceiling (32 MiB on 64-bit) with 0 and keeps
    /// its default: a bigger constant here would silently undo the policy.
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn glibc_takes_both_settings() {
        assert!(super::keep_freed_pages());
        assert!(
            super::keep_freed_pages(),
            "a second call reports the first one's outcome"
        );
    }
}
