//! `--client-refuse drop`: the clients a frontend refuses (bans, its deny rules, what its
//! allow rules leave out, and clients in a refusal episode for their limits) as a classic
//! BPF program on its listening sockets, so that the kernel drops their SYNs before any
//! connection is made: nothing accepted, nothing answered (the client sees a timeout, as
//! with HAProxy's `silent-drop`). Only a SYN without ACK is looked at: connections already
//! open, which inherit the filter, pass untouched.

use socket2::SockFilter;

use super::addr::Cidr;

/// The most instructions the kernel takes in one program.
const MAX_INSNS: usize = 4096;
/// What a program returns to keep a packet whole, and to drop it.
const KEEP: u32 = u32::MAX;
const DROP: u32 = 0;
/// Where the network header starts (the kernel's `SKF_NET_OFF`), the packet itself
/// starting at the TCP header for a TCP socket.
const NET: u32 = (-0x10_0000i32) as u32;

// The opcodes used (linux/filter.h).
const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const LD_B_ABS: u16 = (libc::BPF_LD | libc::BPF_B | libc::BPF_ABS) as u16;
const ALU_AND_K: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;
const ALU_RSH_K: u16 = (libc::BPF_ALU | libc::BPF_RSH | libc::BPF_K) as u16;
const JMP_JA: u16 = (libc::BPF_JMP | libc::BPF_JA) as u16;
const JMP_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
const MISC_TAX: u16 = (libc::BPF_MISC | libc::BPF_TAX) as u16;
const MISC_TXA: u16 = (libc::BPF_MISC | libc::BPF_TXA) as u16;

/// One instruction: opcode, jump if true, jump if false, constant.
pub type Insn = (u16, u8, u8, u32);

fn op(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
    (code, jt, jf, k)
}

/// A program as the socket takes it.
pub fn filters(p: &[Insn]) -> Vec<SockFilter> {
    p.iter()
        .map(|&(c, t, f, k)| SockFilter::new(c, t, f, k))
        .collect()
}

/// A block as the program compares it: IPv4 (one word) or IPv6 (up to four).
enum Words {
    V4 { net: u32, mask: u32 },
    V6(Vec<(u32, u32)>),
}

fn words(c: &Cidr) -> Words {
    let (net, len) = c.parts();
    let mask = |bits: u32| {
        if bits == 0 {
            0
        } else {
            u32::MAX << (32 - bits.min(32))
        }
    };
    if len >= 96 && net >> 32 == 0xffff {
        return Words::V4 {
            net: net as u32,
            mask: mask(u32::from(len) - 96),
        };
    }
    let len = u32::from(len);
    let n = len.div_ceil(32) as usize;
    Words::V6(
        (0..n)
            .map(|w| {
                let word = (net >> (96 - 32 * w)) as u32;
                let bits = len.saturating_sub(32 * w as u32);
                (word, mask(bits))
            })
            .collect(),
    )
}

/// Whether an IPv6 block shorter than /96 holds `::ffff:0:0/96`, every IPv4 address.
fn covers_v4(c: &Cidr) -> bool {
    let (net, len) = c.parts();
    let len = u32::from(len);
    if len > 96 {
        return false;
    }
    let mapped: u128 = 0xffff << 32;
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    };
    mapped & mask == net & mask
}

/// Instructions that return `verdict` when the source is in `block` and fall through when
/// not (the source's IPv4 address in X for IPv4 blocks).
fn test(block: &Words, verdict: u32, out: &mut Vec<Insn>) {
    match block {
        Words::V4 { net, mask } => {
            out.push(op(MISC_TXA, 0, 0, 0));
            out.push(op(ALU_AND_K, 0, 0, *mask));
            out.push(op(JMP_JEQ_K, 0, 1, *net));
            out.push(op(RET_K, 0, 0, verdict));
        }
        Words::V6(ws) => {
            for (i, (word, mask)) in ws.iter().enumerate() {
                let left = (ws.len() - 1 - i) * 3 + 1;
                out.push(op(LD_W_ABS, 0, 0, NET + 8 + 4 * i as u32));
                out.push(op(ALU_AND_K, 0, 0, *mask));
                out.push(op(JMP_JEQ_K, 0, left as u8, *word));
            }
            out.push(op(RET_K, 0, 0, verdict));
        }
    }
}

/// The program: a SYN from a block of `deny` is dropped, and, when `allow` is not empty,
/// one from outside it; everything else passes. `None` when it would be longer than the
/// kernel takes (the blocks left out are then judged after accept, as without it).
pub fn program(deny: &[Cidr], allow: &[Cidr]) -> Option<Vec<Insn>> {
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for (blocks, verdict) in [(deny, DROP), (allow, KEEP)] {
        for c in blocks {
            match words(c) {
                w @ Words::V4 { .. } => test(&w, verdict, &mut v4),
                w => {
                    // An IPv6 block wider than ::ffff:0:0/96 holds every IPv4 address as
                    // the checks after accept read them (mapped): the kernel must agree.
                    if covers_v4(c) {
                        test(&Words::V4 { net: 0, mask: 0 }, verdict, &mut v4);
                    }
                    test(&w, verdict, &mut v6)
                }
            }
        }
    }
    let rest = if allow.is_empty() { KEEP } else { DROP };
    let mut p = vec![
        op(LD_B_ABS, 0, 0, 13),
        op(ALU_AND_K, 0, 0, 0x12),
        op(JMP_JEQ_K, 1, 0, 0x02),
        op(RET_K, 0, 0, KEEP),
        op(LD_B_ABS, 0, 0, NET),
        op(ALU_RSH_K, 0, 0, 4),
        op(JMP_JEQ_K, 0, 1, 4),
        // IPv4: past the IPv6 test.
        op(JMP_JA, 0, 0, 3),
        op(JMP_JEQ_K, 1, 0, 6),
        op(RET_K, 0, 0, KEEP),
        // IPv6: past the IPv4 section.
        op(JMP_JA, 0, 0, (v4.len() + 3) as u32),
        op(LD_W_ABS, 0, 0, NET + 12),
        op(MISC_TAX, 0, 0, 0),
    ];
    p.extend(v4);
    p.push(op(RET_K, 0, 0, rest));
    p.extend(v6);
    p.push(op(RET_K, 0, 0, rest));
    (p.len() <= MAX_INSNS).then_some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `p` over a TCP segment (flags) from `src`, as the kernel would: the verdict.
    fn run(raw: &[Insn], src: std::net::IpAddr, flags: u8) -> u32 {
        let mut tcp = [0u8; 20];
        tcp[13] = flags;
        let net: Vec<u8> = match src {
            std::net::IpAddr::V4(a) => {
                let mut h = vec![0x45u8; 20];
                h[12..16].copy_from_slice(&a.octets());
                h
            }
            std::net::IpAddr::V6(a) => {
                let mut h = vec![0x60u8; 40];
                h[8..24].copy_from_slice(&a.octets());
                h
            }
        };
        let load = |k: u32, n: usize| -> u32 {
            let (buf, at): (&[u8], usize) = if k >= NET {
                (&net, (k - NET) as usize)
            } else {
                (&tcp, k as usize)
            };
            buf[at..at + n]
                .iter()
                .fold(0u32, |a, b| a << 8 | u32::from(*b))
        };
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        loop {
            let (code, jt, jf, k) = raw[pc];
            pc += 1;
            match code {
                LD_W_ABS => a = load(k, 4),
                LD_B_ABS => a = load(k, 1),
                ALU_AND_K => a &= k,
                ALU_RSH_K => a >>= k,
                JMP_JA => pc += k as usize,
                JMP_JEQ_K => pc += usize::from(if a == k { jt } else { jf }),
                RET_K => return k,
                MISC_TAX => x = a,
                MISC_TXA => a = x,
                other => panic!("opcode {other:#x}"),
            }
        }
    }

    fn cidrs(s: &[&str]) -> Vec<Cidr> {
        s.iter().map(|c| c.parse().unwrap()).collect()
    }

    #[test]
    fn syns_from_the_blocks_are_dropped_the_rest_pass() {
        let p = program(
            &cidrs(&["192.0.2.0/24", "10.1.2.3", "2001:db8:1:2::/64"]),
            &[],
        )
        .unwrap();
        let syn = 0x02;
        let ip = |s: &str| s.parse().unwrap();
        assert_eq!(run(&p, ip("192.0.2.77"), syn), DROP);
        assert_eq!(run(&p, ip("10.1.2.3"), syn), DROP);
        assert_eq!(run(&p, ip("10.1.2.4"), syn), KEEP);
        assert_eq!(run(&p, ip("2001:db8:1:2::99"), syn), DROP);
        assert_eq!(run(&p, ip("2001:db8:1:3::1"), syn), KEEP);
        // Not a SYN (an open connection's segment, the handshake's last ACK): passes.
        assert_eq!(run(&p, ip("192.0.2.77"), 0x10), KEEP);
        assert_eq!(run(&p, ip("192.0.2.77"), 0x12), KEEP);
        // With an allow list, only it passes (the deny list over it).
        let p = program(&cidrs(&["10.0.0.9"]), &cidrs(&["10.0.0.0/8", "fd00::/8"])).unwrap();
        assert_eq!(run(&p, ip("10.0.0.8"), syn), KEEP);
        assert_eq!(run(&p, ip("10.0.0.9"), syn), DROP);
        assert_eq!(run(&p, ip("11.0.0.1"), syn), DROP);
        assert_eq!(run(&p, ip("fd12::1"), syn), KEEP);
        assert_eq!(run(&p, ip("2001:db8::1"), syn), DROP);
        // Every address, and none.
        let p = program(&cidrs(&["0.0.0.0/0", "::/0"]), &[]).unwrap();
        assert_eq!(run(&p, ip("8.8.8.8"), syn), DROP);
        assert_eq!(run(&p, ip("2001:db8::1"), syn), DROP);
        let p = program(&[], &[]).unwrap();
        assert_eq!(run(&p, ip("8.8.8.8"), syn), KEEP);
        // An IPv6 block that holds every IPv4 address (mapped) holds them here too, as
        // the checks after accept say (issue 60, point 7).
        for all in ["::/0", "::/8", "::ffff:0:0/96"] {
            let p = program(&[], &cidrs(&[all])).unwrap();
            assert_eq!(run(&p, ip("8.8.8.8"), syn), KEEP, "allow {all}");
            let p = program(&cidrs(&[all]), &[]).unwrap();
            assert_eq!(run(&p, ip("8.8.8.8"), syn), DROP, "deny {all}");
        }
        let p = program(&[], &cidrs(&["2001:db8::/32"])).unwrap();
        assert_eq!(run(&p, ip("8.8.8.8"), syn), DROP, "allow 2001:db8::/32");
        // Too many for the kernel: none.
        let many: Vec<Cidr> = (0..2000u32)
            .map(|i| {
                std::net::Ipv4Addr::from(0x0a00_0000 + i)
                    .to_string()
                    .parse()
                    .unwrap()
            })
            .collect();
        assert!(program(&many, &[]).is_none());
    }

    #[test]
    fn bans_and_rules_stay_in_the_filter_whatever_the_refused_clients() {
        // Issue 60, point 6: past the kernel's length the whole program was dropped, and
        // with it the bans' and rules' SYN drops.
        let c = crate::clients::Clients::new(Default::default(), 64, true);
        c.set_bans(&[crate::clients::bans::Ban {
            block: "192.0.2.0/24".parse().unwrap(),
            until_ms: None,
            reason: String::new(),
        }]);
        let policy = crate::clients::Policy {
            deny: crate::clients::CidrList(cidrs(&["198.51.100.0/24"])),
            ..Default::default()
        };
        let until = crate::clock::unix_ms() + 60_000;
        for i in 0..3000u32 {
            let ip = std::net::Ipv4Addr::from(0x0a00_0000 + i);
            c.shun(c.folding.key(ip.into()), until);
        }
        let (p, next) = c.drop_filter(Some(&policy));
        let p = p.expect("a program that fits");
        assert!(p.len() <= MAX_INSNS);
        assert_eq!(next, Some(until));
        let ip = |s: &str| s.parse().unwrap();
        assert_eq!(run(&p, ip("192.0.2.9"), 0x02), DROP, "the ban");
        assert_eq!(run(&p, ip("198.51.100.9"), 0x02), DROP, "the rule");
        assert_eq!(run(&p, ip("10.0.0.0"), 0x02), DROP, "the first shunned");
        assert_eq!(run(&p, ip("10.0.11.183"), 0x02), KEEP, "the last, left out");
        assert_eq!(run(&p, ip("203.0.113.1"), 0x02), KEEP);
    }
}
