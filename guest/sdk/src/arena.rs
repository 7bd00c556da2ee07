//! The policy's allocator on wasm: a bump arena.
//!
//! The host gives every evaluation a fresh instance, so nothing a policy
//! allocates outlives the call: freeing is wasted work. Allocating from a
//! static arena also means a typical policy never grows its memory, which
//! keeps instantiation cheap (no page-protection changes to undo when the
//! host recycles the instance). Past the arena, allocations take fresh pages
//! with `memory.grow`, still under the host's memory limit.

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::ptr::null_mut;

const ARENA_BYTES: usize = 192 * 1024;
const PAGE: usize = 64 * 1024;

#[repr(C, align(16))]
struct Arena(UnsafeCell<[u8; ARENA_BYTES]>);

// SAFETY: policies are single-threaded (the host compiles no threads in).
unsafe impl Sync for Arena {}

static ARENA: Arena = Arena(UnsafeCell::new([0; ARENA_BYTES]));

struct Cursor(UnsafeCell<usize>);
// SAFETY: as above, single-threaded.
unsafe impl Sync for Cursor {}
static USED: Cursor = Cursor(UnsafeCell::new(0));

/// The bump allocator installed as the global allocator on wasm.
pub struct BumpArena;

fn align_up(addr: usize, align: usize) -> usize {
    (addr + align - 1) & !(align - 1)
}

unsafe impl GlobalAlloc for BumpArena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let base = ARENA.0.get() as usize;
        // SAFETY: single-threaded; nothing else holds the cursor.
        let used = unsafe { &mut *USED.0.get() };
        let start = align_up(base + *used, layout.align());
        let Some(end) = start.checked_add(layout.size()) else {
            return null_mut();
        };
        if end <= base + ARENA_BYTES {
            *used = end - base;
            return start as *mut u8;
        }
        // The arena is full: take whole fresh pages from the host.
        let Some(bytes) = layout.size().checked_add(layout.align()) else {
            return null_mut();
        };
        let pages = bytes.div_ceil(PAGE);
        let previous = core::arch::wasm32::memory_grow(0, pages);
        if previous == usize::MAX {
            return null_mut();
        }
        align_up(previous * PAGE, layout.align()) as *mut u8
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Only the most recent arena allocation can be given back (a stack);
        // everything else is reclaimed when the host drops the instance.
        let base = ARENA.0.get() as usize;
        // SAFETY: single-threaded.
        let used = unsafe { &mut *USED.0.get() };
        if ptr as usize + layout.size() == base + *used {
            *used = ptr as usize - base;
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let base = ARENA.0.get() as usize;
        // SAFETY: single-threaded.
        let used = unsafe { &mut *USED.0.get() };
        // Growing the most recent allocation in place is the common case
        // (a String or Vec being built).
        if ptr as usize + layout.size() == base + *used
            && ptr as usize + new_size <= base + ARENA_BYTES
        {
            *used = ptr as usize + new_size - base;
            return ptr;
        }
        // SAFETY: the layout is valid (same align, size checked by alloc).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: forwarding to our own alloc/dealloc with valid layouts.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are valid for the smaller of the two sizes.
            unsafe {
                core::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}
