//! The `toolmesh` command: the allocator, and the one `unsafe` hook the
//! libraries cannot hold (they forbid `unsafe`).

/// mimalloc: glibc's malloc serialises the runtime's threads on its arena
/// locks under load (seen in profiles of the dispatcher's call path).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    toolmesh_cli::main(arm_parent_death)
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
