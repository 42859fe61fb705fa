//! The `toolmesh` command: the allocator, and the `unsafe` hooks the
//! libraries cannot hold (they forbid `unsafe`).

/// mimalloc: glibc's malloc serialises the runtime's threads on its arena
/// locks under load (seen in profiles of the dispatcher's call path).
#[cfg(not(feature = "bench"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// In bench builds, mimalloc reporting each allocation and release to the
/// bench, which counts them only while it measures allocations per call or
/// the memory a structure holds.
#[cfg(feature = "bench")]
#[global_allocator]
static ALLOCATOR: counted::Counted = counted::Counted;

#[cfg(feature = "bench")]
mod counted {
    use mimalloc::MiMalloc;
    use std::alloc::{GlobalAlloc, Layout};
    use toolmesh_bench::allocations::{note, note_free};

    pub(crate) struct Counted;

    // SAFETY: each method forwards its arguments unchanged to mimalloc,
    // which upholds the contract; `note` only touches atomics and never
    // allocates.
    unsafe impl GlobalAlloc for Counted {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            note(layout.size());
            // SAFETY: the caller's `layout` is passed on as given.
            unsafe { MiMalloc.alloc(layout) }
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            note(layout.size());
            // SAFETY: as for `alloc`.
            unsafe { MiMalloc.alloc_zeroed(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            note_free(layout.size());
            // SAFETY: `ptr` came from this allocator, i.e. from mimalloc.
            unsafe { MiMalloc.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            note_free(layout.size());
            note(new_size);
            // SAFETY: `ptr` came from mimalloc; the arguments are the caller's.
            unsafe { MiMalloc.realloc(ptr, layout, new_size) }
        }
    }
}

fn main() -> std::process::ExitCode {
    toolmesh_cli::main(toolmesh_cli::Hooks { arm_parent_death })
}

/// Has the kernel send `signal` to the child `command` starts when the
/// thread that starts it dies (`PR_SET_PDEATHSIG`), so the children of `up`
/// and `bench` do not outlive a killed parent. The child fails to start if
/// the parent is already gone.
fn arm_parent_death(command: &mut tokio::process::Command, signal: i32) {
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id();
        // SAFETY: the closure runs in the child between fork and exec, where
        // only async-signal-safe functions may be called: it calls prctl(2)
        // and getppid(2) only, allocates nothing and takes no lock.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, signal) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent died before prctl: the signal would never come.
                if u32::try_from(libc::getppid()).ok() != Some(parent) {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (command, signal);
}
