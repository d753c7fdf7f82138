//! `--user`, `--group`, `--chroot`: shuck binds its ports and reads its keys as root, then
//! becomes an unprivileged user (optionally shut in a directory) before serving anything.

use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Group, Uid, User};

use super::SystemError;

/// Whom to become, resolved when the configuration is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The user, with its id.
    pub user: Option<(String, Uid)>,
    /// The group: `--group`, else the user's primary group.
    pub group: Option<(String, Gid)>,
    /// The directory to chroot into.
    pub chroot: Option<PathBuf>,
}

impl Target {
    /// Looks the names up (errors name the option and the name).
    pub fn resolve(
        user: Option<&str>,
        group: Option<&str>,
        chroot: Option<&Path>,
    ) -> Result<Self, SystemError> {
        let lookup_err = |option| {
            move |e: nix::Error| SystemError::call(format!("{option}: cannot look it up"), e)
        };
        let user = match user {
            Some(name) => {
                let u = User::from_name(name)
                    .map_err(lookup_err("--user"))?
                    .ok_or_else(|| SystemError::Unknown {
                        option: "--user",
                        name: name.to_owned(),
                        what: "user",
                    })?;
                Some(u)
            }
            None => None,
        };
        let group = match group {
            Some(name) => {
                let g = Group::from_name(name)
                    .map_err(lookup_err("--group"))?
                    .ok_or_else(|| SystemError::Unknown {
                        option: "--group",
                        name: name.to_owned(),
                        what: "group",
                    })?;
                Some((g.name, g.gid))
            }
            None => user
                .as_ref()
                .map(|u| (format!("{}'s group", u.name), u.gid)),
        };
        if let Some(dir) = chroot {
            if !dir.is_dir() {
                return Err(SystemError::call(
                    format!("--chroot {}", dir.display()),
                    std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory"),
                ));
            }
        }
        Ok(Target {
            user: user.map(|u| (u.name, u.uid)),
            group,
            chroot: chroot.map(Path::to_owned),
        })
    }

    /// True when there is nothing to do.
    pub fn is_none(&self) -> bool {
        self.user.is_none() && self.group.is_none() && self.chroot.is_none()
    }

    /// Chroots, then sets the groups, the group and the user, and checks that root cannot
    /// be had back. Every thread of the process changes (glibc applies set*id to all).
    pub fn apply(&self) -> Result<(), SystemError> {
        if let Some(dir) = &self.chroot {
            nix::unistd::chroot(dir)
                .map_err(|e| SystemError::call(format!("--chroot {}", dir.display()), e))?;
            nix::unistd::chdir("/").map_err(|e| {
                SystemError::call(format!("--chroot {}: chdir /", dir.display()), e)
            })?;
        }
        if let Some((name, gid)) = &self.group {
            nix::unistd::setgroups(&[*gid])
                .map_err(|e| SystemError::call(format!("cannot drop supplementary groups for {name} (shuck must start as root to change user)"), e))?;
            nix::unistd::setgid(*gid)
                .map_err(|e| SystemError::call(format!("cannot switch to group {name}"), e))?;
        }
        if let Some((name, uid)) = &self.user {
            nix::unistd::setuid(*uid).map_err(|e| {
                SystemError::call(
                    format!(
                        "cannot switch to user {name} (shuck must start as root to change user)"
                    ),
                    e,
                )
            })?;
            if !uid.is_root() && nix::unistd::setuid(Uid::from_raw(0)).is_ok() {
                return Err(SystemError::call(
                    format!("switched to user {name} but root could be had back"),
                    std::io::Error::other("refusing to serve"),
                ));
            }
        }
        Ok(())
    }
}
