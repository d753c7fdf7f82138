//! The process's resource limits.

/// A proxy holds two descriptors per connection: take all the system allows
/// (RLIMIT_NOFILE up to its hard limit), or say why not and go on with what there is.
pub fn raise_nofile() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => tracing::debug!(name: "nofile_raised", limit = n, "RLIMIT_NOFILE raised"),
        Err(e) => {
            tracing::warn!(name: "nofile_not_raised", error = %e, "cannot raise RLIMIT_NOFILE")
        }
    }
}
