//! What a feature costs, measured as pairs: a server with it on (`X-log`: its access log;
//! `X-rules`: ten header rules) against the same server with it off (`X`), one run of each
//! per round. Each round gives one ratio; the
//! report gives their median and quartiles. The machine's speed drifts between rounds (on
//! the dev VM, a quarter from one comparison to the next), and a ratio taken within a round
//! cancels that drift where the medians of the two servers' runs, taken apart, do not.

use std::fmt::Write as _;

/// One server's runs at one size, in round order: every round's server CPU a request, µs
/// (a server with a failed run has none here), so that its runs and its twin's pair up by
/// position. Plain numbers, so that this module needs nothing of the benchmarks it serves.
pub(crate) struct Runs<'a> {
    pub(crate) target: &'a str,
    pub(crate) size: &'a str,
    pub(crate) runs: Vec<f64>,
}

/// The features measured so, by the suffix of the server with it on, and their names.
const FEATURES: [(&str, &str); 2] = [
    ("-log", "The log's cost"),
    ("-rules", "Ten header rules' cost"),
];

/// The cost of each `X{suffix}` over its `X` at one size: (the server `X`, per-round ratios).
fn pairs<'a>(all: &'a [Runs<'a>], suffix: &str) -> Vec<(&'a str, &'a str, Vec<f64>)> {
    let mut out = Vec::new();
    for on in all {
        let Some(base) = on.target.strip_suffix(suffix) else {
            continue;
        };
        let Some(off) = all.iter().find(|r| r.target == base && r.size == on.size) else {
            continue;
        };
        let ratios = off
            .runs
            .iter()
            .zip(&on.runs)
            .map(|(a, b)| b / a.max(f64::MIN_POSITIVE) - 1.0)
            .collect();
        out.push((base, on.size, ratios));
    }
    out
}

/// The value at quantile `q` (0..=1) of sorted `v`, by linear interpolation.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let pos = q * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// The report's sections on each feature's cost, or nothing when no `X-log` or
/// `X-rules` has its `X`.
pub(crate) fn render(all: &[Runs<'_>]) -> String {
    let mut s = String::new();
    for (suffix, what) in FEATURES {
        render_one(all, suffix, what, &mut s);
    }
    s
}

fn render_one(all: &[Runs<'_>], suffix: &str, what: &str, s: &mut String) {
    let found = pairs(all, suffix);
    if found.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n{what}, server CPU a request with it on over the same server with it off, \
         a ratio each round (both measured in the same round):\n\n\
         | size | server | cost, median | middle half of the rounds | rounds | each round, in order |\n\
         |---|---|---|---|---|---|"
    );
    for (base, size, ratios) in found {
        let each: Vec<String> = ratios
            .iter()
            .map(|r| format!("{:+.1}", r * 100.0))
            .collect();
        let mut sorted = ratios;
        sorted.sort_by(f64::total_cmp);
        let pct = |x: f64| format!("{:+.1} %", x * 100.0);
        let _ = writeln!(
            s,
            "| {size} | {base} | {} | {} to {} | {} | {} |",
            pct(quantile(&sorted, 0.5)),
            pct(quantile(&sorted, 0.25)),
            pct(quantile(&sorted, 0.75)),
            sorted.len(),
            each.join(" ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run's CPU a request for `cpu_us` over 100 requests.
    fn m(cpu_us: u64) -> f64 {
        cpu_us as f64 / 100.0
    }

    #[test]
    fn a_ratio_a_round_and_their_median() {
        // Round 2 runs a quarter slower for both: its ratio is the same as round 1's.
        let off = [m(1000), m(1250), m(1000)];
        let on = [m(1100), m(1375), m(1300)];
        let other = [m(500)];
        let all = [
            Runs {
                target: "shuck",
                size: "0",
                runs: off.to_vec(),
            },
            Runs {
                target: "shuck-log",
                size: "0",
                runs: on.to_vec(),
            },
            Runs {
                target: "haproxy-log",
                size: "0",
                runs: other.to_vec(),
            },
        ];
        let got = pairs(&all, "-log");
        assert_eq!(got.len(), 1, "haproxy-log has no haproxy to pair with");
        let (base, size, r) = &got[0];
        assert_eq!((*base, *size), ("shuck", "0"));
        let r: Vec<String> = r.iter().map(|x| format!("{x:.3}")).collect();
        assert_eq!(r, ["0.100", "0.100", "0.300"]);
        let text = render(&all);
        assert!(
            text.contains("| 0 | shuck | +10.0 % | +10.0 % to +20.0 % | 3 | +10.0 +10.0 +30.0 |"),
            "{text}"
        );
    }

    #[test]
    fn quantiles_interpolate() {
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0], 0.5), 2.5);
        assert_eq!(quantile(&[5.0], 0.25), 5.0);
        assert!(quantile(&[], 0.5).is_nan());
        assert!(render(&[]).is_empty());
    }
}
