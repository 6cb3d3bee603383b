//! How the process heap treats large buffers: the short-lived ones of a forward pass
//! ([`keep_freed_pages`]) and the weights a load fills ([`zeroed`]).
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
pub(crate) fn keep_freed_pages() -> bool {
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

/// Values for which all-zero bytes are a valid value: what [`zeroed`] may hand out.
///
/// # Safety
/// An implementor must be plain data whose every field is zero-valid (integers, floats,
/// `half`'s types, arrays and `repr(C)` structs of them) and have no `Drop`.
pub(crate) unsafe trait ZeroBits: Sized {}
// SAFETY: integers and IEEE floats are zero-valid.
unsafe impl ZeroBits for u8 {}
// SAFETY: as above.
unsafe impl ZeroBits for f32 {}
// SAFETY: bf16 is `repr(transparent)` over u16.
unsafe impl ZeroBits for half::bf16 {}
// SAFETY: ggml blocks are `repr(C)` structs of f16s and byte arrays.
unsafe impl ZeroBits for candle_core::quantized::k_quants::BlockQ4K {}
// SAFETY: as above.
unsafe impl ZeroBits for candle_core::quantized::k_quants::BlockQ8_0 {}

/// Allocations at least this large ask for transparent huge pages.
const HUGE_MIN_BYTES: usize = 4 << 20;
const HUGE_PAGE: usize = 2 << 20;

/// `n` zeroed values, for a buffer about to be filled (weights read at load).
///
/// Why not `vec![x; n]`: for types other than the primitive numbers it writes every element
/// before the caller writes them again (on one thread: the kernel then faults every page in
/// from there), and for a large buffer the pages it gets are 4 KiB ones, each a fault the
/// kernel zeroes on first touch: the loads of the 3B model spent 55–60 % of their time there
/// (`perf`: `clear_page_erms`, `exc_page_fault`). Here the memory comes zeroed from the
/// allocator untouched (glibc maps large blocks fresh) and, for large buffers on Linux, is
/// marked `MADV_HUGEPAGE` before the first touch, so the fill faults it in 2 MiB at a time
/// where the kernel's transparent huge pages allow (`madvise` mode included). Only a hint: a
/// kernel that declines gives the same buffer with small pages.
pub(crate) fn zeroed<T: ZeroBits>(n: usize) -> Vec<T> {
    let layout = std::alloc::Layout::array::<T>(n).expect("buffer size overflows");
    if layout.size() == 0 {
        return Vec::new();
    }
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if ptr.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    advise_huge(ptr.cast(), layout.size());
    // SAFETY: `ptr` was allocated by the global allocator with `T`'s alignment and room for
    // `n` values, all zero bytes, which `ZeroBits` says is a valid `T`.
    unsafe { Vec::from_raw_parts(ptr, n, n) }
}

#[cfg(target_os = "linux")]
fn advise_huge(ptr: *mut u8, len: usize) {
    if len < HUGE_MIN_BYTES {
        return;
    }
    let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
    let end = (ptr as usize + len) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        // SAFETY: the range lies inside the allocation just made, and MADV_HUGEPAGE changes
        // only how the kernel backs it, never its contents.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge(_ptr: *mut u8, _len: usize) {}

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

    /// Zeroed buffers of every kind the loaders ask for, small (no hint) and large (hinted):
    /// all zero, the asked length, writable to the end.
    #[test]
    fn zeroed_buffers_are_zero_and_whole() {
        use candle_core::quantized::k_quants::BlockQ4K;
        for n in [0, 1, 1000, (9 << 20) / 4 + 3] {
            let mut v = super::zeroed::<f32>(n);
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&x| x == 0.0));
            if let Some(last) = v.last_mut() {
                *last = 1.0;
            }
            let b = super::zeroed::<u8>(n);
            assert!(b.len() == n && b.iter().all(|&x| x == 0));
        }
        let q = super::zeroed::<BlockQ4K>(40_000);
        assert_eq!(q.len(), 40_000);
        // SAFETY: the blocks are plain bytes (`ZeroBits`), viewed read-only while `q` lives.
        let bytes = unsafe {
            std::slice::from_raw_parts(q.as_ptr().cast::<u8>(), std::mem::size_of_val(&q[..]))
        };
        assert!(bytes.iter().all(|&x| x == 0));
    }
}
