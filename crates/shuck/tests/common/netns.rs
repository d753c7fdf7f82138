//! A farm on a real network for the tests: hosts that are Linux network namespaces, each
//! joined to a bridge in the root namespace by a veth pair. Every namespace and link is
//! removed at drop, also when the test fails.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{sh, skip, TempDir};

/// Hosts in a farm.
pub const HOSTS: usize = 3;

/// Three namespaces on a bridge in the root namespace, 10.77.N.{1,2,3}/24 and
/// fd77:0:0:N::{1,2,3}/64; the bridge holds .254 and ::fe.
pub struct Farm {
    pub tag: String,
    pub net: u8,
    made: Vec<String>,
}

impl Farm {
    pub fn create() -> Option<Farm> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let tag = format!("sk{}{}", std::process::id() % 100_000, n);
        let net = ((std::process::id() as usize * 4 + n) % 250 + 1) as u8;
        let mut farm = Farm {
            tag,
            net,
            made: Vec::new(),
        };
        let probe = format!("{}probe", farm.tag);
        if !Command::new("ip")
            .args(["netns", "add", &probe])
            .status()
            .is_ok_and(|s| s.success())
        {
            skip("cannot create network namespaces (not root?); the farm test");
            return None;
        }
        let _ = Command::new("ip").args(["netns", "del", &probe]).status();
        let br = farm.bridge();
        farm.made.push(format!("link:{br}"));
        sh(&format!(
            "ip link add {br} type bridge mcast_snooping 0 && ip addr add 10.77.{net}.254/24 dev {br} \
             && ip -6 addr add fd77:0:0:{net}::fe/64 dev {br} nodad && ip link set {br} up",
            net = farm.net
        ));
        for i in 1..=HOSTS {
            let ns = farm.ns(i);
            farm.made.push(format!("netns:{ns}"));
            let (v, p) = (format!("{}v{i}", farm.tag), format!("{}p{i}", farm.tag));
            sh(&format!(
                "ip netns add {ns} && ip link add {v} type veth peer name {p} \
                 && ip link set {p} netns {ns} && ip link set {v} master {br} && ip link set {v} up \
                 && ip -n {ns} link set {p} name eth0 && ip -n {ns} link set lo up \
                 && ip -n {ns} addr add 10.77.{net}.{i}/24 dev eth0 \
                 && ip -n {ns} -6 addr add fd77:0:0:{net}::{i}/64 dev eth0 nodad \
                 && ip -n {ns} link set eth0 up",
                net = farm.net
            ));
        }
        Some(farm)
    }

    pub fn bridge(&self) -> String {
        format!("{}br", self.tag)
    }

    pub fn ns(&self, i: usize) -> String {
        format!("{}h{i}", self.tag)
    }

    pub fn ip(&self, i: usize) -> String {
        format!("10.77.{}.{i}", self.net)
    }

    /// The bridge's address in the root namespace, where a shared redis-server listens.
    pub fn bridge_ip(&self) -> String {
        format!("10.77.{}.254", self.net)
    }
}

impl Drop for Farm {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the veth pair, and so the pair.
        for what in self.made.iter().rev() {
            let (kind, name) = what.split_once(':').unwrap();
            let args: &[&str] = match kind {
                "netns" => &["netns", "del", name],
                _ => &["link", "del", name],
            };
            let _ = Command::new("ip").args(args).stderr(Stdio::null()).status();
        }
    }
}

/// The farm key every host shares (`--shared-cache-key`), in a file of mode 0600.
pub fn key_file(dir: &TempDir) -> String {
    let p = dir.path("farm.key");
    std::fs::write(&p, "ZmFybSBrZXkgZm9yIHRoZSBzaHVjayB0ZXN0cyEhISE=\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p.to_str().unwrap().to_owned()
}
