//! A counting global allocator, for the tests that prove a path allocates nothing (or
//! says how much it allocates).
//!
//! A test binary makes [`CountingAllocator`] its global allocator, then reads either
//! count:
//!
//! - [`allocations`]: every allocation call of the whole process since it started, on
//!   every thread (for code that works on threads of its own: event loops, runners);
//! - [`counted`]: the allocation calls, and the bytes they ask for, made on the calling
//!   thread while a closure runs (for code that runs on the test's thread, unaffected by
//!   the test harness's other threads).
//!
//! An allocation call is `alloc`, `alloc_zeroed` or `realloc` (a reallocation counts as
//! one, of its new size); `dealloc` is not counted. Both counts are zero in a binary
//! whose global allocator is another.
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOCATOR: flint_testkit::alloc::CountingAllocator =
//!     flint_testkit::alloc::CountingAllocator;
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Forwards to the system allocator, counting every allocation call in the process and,
/// on threads inside [`counted`], on that thread.
pub struct CountingAllocator;

/// Allocation calls (alloc, alloc_zeroed, realloc) since the process started.
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static THREAD_ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    static THREAD_BYTES: Cell<u64> = const { Cell::new(0) };
}

fn note_allocation(size: usize) {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    // `try_with`: the thread-locals may be gone while a thread shuts down.
    let _ = COUNTING.try_with(|counting| {
        if counting.get() {
            let _ = THREAD_ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
            let _ = THREAD_BYTES.try_with(|n| n.set(n.get() + size as u64));
        }
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; the bookkeeping
// touches only an atomic and const-initialised thread-locals, which never allocate.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation(layout.size());
        // SAFETY: the caller's obligations for `alloc` are passed on as they are.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation(new_size);
        // SAFETY: `ptr` was allocated by `System` with `layout`, as the caller promises.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`, as the caller promises.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// The allocation calls made so far by the whole process, on every thread.
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::SeqCst)
}

/// The allocations [`counted`] saw on its thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Allocations {
    /// Allocation calls.
    pub calls: u64,
    /// The bytes they asked for (a reallocation: its new size).
    pub bytes: u64,
}

/// Runs `f`, and returns what it returned and the allocations it made on this thread.
pub fn counted<T>(f: impl FnOnce() -> T) -> (T, Allocations) {
    THREAD_ALLOCATIONS.with(|n| n.set(0));
    THREAD_BYTES.with(|n| n.set(0));
    COUNTING.with(|c| c.set(true));
    let out = f();
    COUNTING.with(|c| c.set(false));
    let allocations = Allocations {
        calls: THREAD_ALLOCATIONS.with(Cell::get),
        bytes: THREAD_BYTES.with(Cell::get),
    };
    (out, allocations)
}
