//! What the kernel says of a server: CPU time and resident memory of a process and all its
//! descendants (nginx's and hitch's workers, every thread), from /proc.

use std::fs;

/// The process and its descendants.
pub fn tree(root: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(dir) = fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(ppid) = stat_fields(pid).and_then(|f| f.get(1).and_then(|s| s.parse().ok()))
            {
                parents.push((pid, ppid));
            }
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out
}

/// Fields of /proc/PID/stat after the command name (field 3 onwards: state, ppid, ...).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: cut at the last ')'.
    let rest = &s[s.rfind(')')? + 2..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// Clock ticks per second for /proc times.
pub fn clock_ticks() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

/// CPU time (user + system, all threads, including threads that have ended) of the process
/// tree, in microseconds.
pub fn cpu_us(root: u32, ticks: u64) -> u64 {
    tree(root)
        .into_iter()
        .filter_map(|pid| {
            let f = stat_fields(pid)?;
            // utime and stime are fields 14 and 15, i.e. 11 and 12 after the name.
            let ut: u64 = f.get(11)?.parse().ok()?;
            let st: u64 = f.get(12)?.parse().ok()?;
            Some((ut + st) * 1_000_000 / ticks.max(1))
        })
        .sum()
}

/// Resident memory of the process tree, bytes.
pub fn rss_bytes(root: u32) -> u64 {
    tree(root)
        .into_iter()
        .filter_map(|pid| {
            let s = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb * 1024)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_measured() {
        let me = std::process::id();
        assert!(tree(me).contains(&me));
        assert!(rss_bytes(me) > 1 << 20);
        let ticks = clock_ticks();
        let before = cpu_us(me, ticks);
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(300) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let spent = cpu_us(me, ticks) - before;
        assert!(spent >= 150_000, "{spent} µs for 300 ms of spinning");
    }

    #[test]
    fn children_are_in_the_tree() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let t = tree(std::process::id());
        let _ = child.kill();
        let _ = child.wait();
        assert!(t.contains(&child.id()));
    }
}
