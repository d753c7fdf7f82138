//! The one `unsafe` fork of the process, refused unless the master has a single thread.

use nix::unistd::Pid;

pub(super) enum Forked {
    Child,
    Parent(Pid),
}

/// fork(2), refused unless this process has one thread.
#[allow(unsafe_code)]
pub(super) fn fork_single_threaded() -> std::io::Result<Forked> {
    let threads = std::fs::read_dir("/proc/self/task")?.count();
    if threads != 1 {
        return Err(std::io::Error::other(format!(
            "the master process has {threads} threads; it forks only with one"
        )));
    }
    // SAFETY: fork is unsound only when another thread may hold a lock (the allocator's,
    // stdio's, a mutex) that the child would then find held forever. The master never
    // starts a thread (it runs no runtime, no service; those live in the worker), and the
    // count just read from /proc says this process has exactly one, this one; so no lock
    // can be held by anyone but the caller, and the child runs ordinary Rust from here.
    match unsafe { nix::unistd::fork() }.map_err(std::io::Error::from)? {
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent(child)),
    }
}
