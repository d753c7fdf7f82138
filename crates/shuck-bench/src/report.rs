//! Reports of a compare run: Markdown for people, JSON for tools, SVG plots (plotters).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use plotters::prelude::*;

use crate::peers::Target;
use crate::results::{Results, ScenarioResult, TargetResult};

/// The current UTC time, ISO 8601.
pub fn utc_now() -> String {
    sh("date -u +%Y-%m-%dT%H:%M:%SZ")
}

/// CPU model, cores, memory and kernel.
pub fn machine() -> String {
    let model = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2");
    let mem = sh("awk '/MemTotal/ {printf \"%.0f GiB\", $2/1048576}' /proc/meminfo");
    format!(
        "{}, {} cores, {}, Linux {}",
        model.trim(),
        sh("nproc"),
        mem,
        sh("uname -r")
    )
}

fn sh(cmd: &str) -> String {
    Command::new("sh")
        .args(["-c", cmd])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// How a scenario is judged: the figure compared and the most shuck may spend relative to
/// the best peer.
pub fn criterion(name: &str) -> Option<(&'static str, f64)> {
    match name {
        n if n.starts_with("full-") => Some(("CPU µs/conn", 0.9)),
        n if n.starts_with("resume-") => Some(("CPU µs/conn", 0.8)),
        "keepalive-4" | "keepalive-80" => Some(("CPU µs/req", 0.8)),
        "size-1m" => Some(("CPU µs/conn", 1.0)),
        "idle-memory" => Some(("bytes/conn", 0.5)),
        _ => None,
    }
}

/// The figure a scenario is judged by, for one server.
pub fn figure(sc: &ScenarioResult, t: &TargetResult) -> Option<f64> {
    if let Some(i) = &t.idle {
        return Some(i.bytes_per_conn);
    }
    let m = t.median.as_ref()?;
    if m.load.completed == 0 {
        return None;
    }
    Some(match criterion(sc.scenario.name) {
        Some(("CPU µs/req", _)) => m.cpu_us_per_req,
        _ => m.cpu_us_per_conn,
    })
}

/// The honest limit of the figure a scenario is judged by: the relay's figure for the same
/// connections and requests plus the scenario's crypto floor; `None` without a relay figure.
pub fn honest_limit(sc: &ScenarioResult, c: &crate::capacity::Capacity) -> Option<f64> {
    let relay = sc
        .targets
        .iter()
        .find(|t| t.target == Target::Relay)
        .and_then(|t| figure(sc, t))?;
    let per_request = match criterion(sc.scenario.name)? {
        ("CPU µs/req", _) => true,
        ("CPU µs/conn", _) => false,
        _ => return None,
    };
    Some(relay + crate::limit::crypto_floor(&sc.scenario, c, per_request))
}

/// shuck's figure, the best peer's, and the ratio.
pub fn standing(sc: &ScenarioResult) -> Option<(f64, Target, f64, f64)> {
    let shuck = sc
        .targets
        .iter()
        .find(|t| t.target == Target::Shuck)
        .and_then(|t| figure(sc, t))?;
    let (best_t, best) = sc
        .targets
        .iter()
        .filter(|t| t.target.is_peer())
        .filter_map(|t| figure(sc, t).map(|f| (t.target, f)))
        .min_by(|a, b| a.1.total_cmp(&b.1))?;
    Some((shuck, best_t, best, shuck / best))
}

/// Writes `<out>/compare-<date>.{md,json}` and one SVG per scenario; returns the Markdown path.
pub fn write(res: &Results, out: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let stem = format!("compare-{}", res.date.replace([':', '-'], ""));
    let json = out.join(format!("{stem}.json"));
    std::fs::write(&json, serde_json::to_string_pretty(res)?)?;
    let fonts = load_font();
    let mut plots = Vec::new();
    if fonts {
        for sc in &res.scenarios {
            let p = out.join(format!("{stem}-{}.svg", sc.scenario.name));
            if plot(sc, &p).is_ok() {
                plots.push((sc.scenario.name, p));
            }
        }
    }
    let md = out.join(format!("{stem}.md"));
    std::fs::write(&md, markdown(res, &stem, &plots, fonts))?;
    Ok(md)
}

/// The Markdown report.
pub fn markdown(res: &Results, stem: &str, plots: &[(&str, PathBuf)], fonts: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# shuck-bench compare, {}\n", res.date);
    let _ = writeln!(s, "- command: `{}`", res.command);
    let _ = writeln!(s, "- machine: {}", res.machine);
    let _ = writeln!(s, "- pinning: {}", res.pinning);
    for (t, v) in &res.versions {
        let _ = writeln!(s, "- {t}: {v}");
    }
    let _ = writeln!(s, "- raw data: `{stem}.json`\n");
    let c = &res.capacity;
    let _ = writeln!(
        s,
        "## Crypto floor on this machine (shuck-bench capacity)\n"
    );
    let _ = writeln!(
        s,
        "| operation | µs | per second per core |\n|---|---:|---:|"
    );
    for (n, us) in [
        ("RSA-2048 sign", c.rsa2048_sign_us),
        ("RSA-3072 sign", c.rsa3072_sign_us),
        ("RSA-4096 sign", c.rsa4096_sign_us),
        ("ECDSA P-256 sign", c.ecdsa_p256_sign_us),
        ("X25519 keygen + agree", c.x25519_us),
        ("full handshake floor, RSA-2048", c.floor_us(true)),
        ("full handshake floor, ECDSA P-256", c.floor_us(false)),
    ] {
        let _ = writeln!(s, "| {n} | {us:.1} | {:.0} |", 1e6 / us);
    }
    let _ = writeln!(
        s,
        "\nAES-128-GCM: {:.0} MB/s, ChaCha20-Poly1305: {:.0} MB/s per core.\n",
        c.aes128gcm_bytes_per_s / 1e6,
        c.chacha20_bytes_per_s / 1e6
    );

    let _ = writeln!(
        s,
        "## Standing against the best peer and the honest limit\n"
    );
    let _ = writeln!(s, "The limit is the relay's figure (HAProxy in TCP mode without TLS, the same connections and requests) plus the crypto floor of the scenario's handshakes and bytes (`capacity`).\n");
    let _ = writeln!(s, "| scenario | figure | shuck | best peer | ratio | target | met | limit | × limit |\n|---|---|---:|---|---:|---:|---|---:|---:|");
    for sc in &res.scenarios {
        let Some((what, limit)) = criterion(sc.scenario.name) else {
            continue;
        };
        let honest = honest_limit(sc, c);
        let mine = sc
            .targets
            .iter()
            .find(|t| t.target == Target::Shuck)
            .and_then(|t| figure(sc, t));
        let (limit_col, times_col) = match (honest, mine) {
            (Some(l), Some(m)) => (format!("{l:.1}"), format!("{:.2}", m / l)),
            (Some(l), None) => (format!("{l:.1}"), "–".into()),
            _ => ("–".into(), "–".into()),
        };
        match standing(sc) {
            Some((mine, bt, best, ratio)) => {
                let _ = writeln!(
                    s,
                    "| {} | {what} | {mine:.1} | {} {best:.1} | {ratio:.2} | ≤ {limit} | {} | {limit_col} | {times_col} |",
                    sc.scenario.name,
                    bt.name(),
                    if ratio <= limit { "yes" } else { "**no**" }
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "| {} | {what} | {} | – | – | ≤ {limit} | no figure | {limit_col} | {times_col} |",
                    sc.scenario.name,
                    mine.map_or("–".into(), |m| format!("{m:.1}"))
                );
            }
        }
    }
    for sc in res
        .scenarios
        .iter()
        .filter(|sc| sc.scenario.name.starts_with("resume-"))
    {
        let of = |target: Target| {
            let runs: Vec<&TargetResult> =
                sc.targets.iter().filter(|r| r.target == target).collect();
            let cpu: Vec<f64> = runs.iter().filter_map(|r| figure(sc, r)).collect();
            let p99: Vec<f64> = runs
                .iter()
                .filter_map(|r| Some(r.median.as_ref()?.load.session_ms.p99))
                .collect();
            let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
            Some((mean(&cpu)?, mean(&p99)?))
        };
        if let (Some((redis, redis_p99)), Some((local, local_p99))) =
            (of(Target::ShuckRedis), of(Target::ShuckCache))
        {
            let _ = writeln!(s, "\n{}: a resumption found in Redis costs {:.2}× the server CPU of one found in the local cache: {redis:.1} µs (shuck-redis) against {local:.1} µs (shuck-cache); target ≤ 1.2×. p99 session latency {redis_p99:.2} ms against {local_p99:.2} ms ({:+.2} ms; target ≤ +1 ms).", sc.scenario.name, redis / local, redis_p99 - local_p99);
        }
    }
    for sc in res
        .scenarios
        .iter()
        .filter(|sc| sc.scenario.name.starts_with("full-"))
    {
        let mean = |target: Target| {
            let v: Vec<f64> = sc
                .targets
                .iter()
                .filter(|r| r.target == target)
                .filter_map(|r| figure(sc, r))
                .collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        if let (Some(with), Some(without)) = (mean(Target::ShuckSync), mean(Target::ShuckCache)) {
            let _ = writeln!(s, "\n{}: replication costs {:+.1} % server CPU per full handshake: {with:.1} µs (shuck-sync) against {without:.1} µs (shuck-cache, the same settings without it); target < +5 %.", sc.scenario.name, (with / without - 1.0) * 100.0);
        }
        if let Some(t) = sc
            .targets
            .iter()
            .find(|t| t.target == Target::Shuck)
            .and_then(|t| figure(sc, t))
        {
            let floor = c.floor_us(sc.scenario.name.contains("rsa"));
            let _ = writeln!(s, "\n{}: shuck spends {t:.1} µs per full handshake, {:.2}× the crypto floor ({floor:.1} µs; target ≤ 1.2×).", sc.scenario.name, t / floor);
        }
    }
    if let Some(sc) = res.scenarios.iter().find(|sc| sc.scenario.idle) {
        if let Some(t) = sc
            .targets
            .iter()
            .find(|t| t.target == Target::Shuck)
            .and_then(|t| figure(sc, t))
        {
            let _ = writeln!(
                s,
                "\nidle-memory: shuck holds {t:.0} bytes per idle TLS connection (target < 10240)."
            );
        }
    }

    for sc in &res.scenarios {
        let _ = writeln!(s, "\n## {}: {}\n", sc.scenario.name, sc.scenario.about);
        if sc.scenario.idle {
            let _ = writeln!(s, "| server | status | established | RSS before | RSS after | bytes/conn |\n|---|---|---:|---:|---:|---:|");
            for t in &sc.targets {
                match &t.idle {
                    Some(i) => {
                        let _ = writeln!(
                            s,
                            "| {} | {} | {} | {:.1} MB | {:.1} MB | {:.0} |",
                            t.target.name(),
                            t.status,
                            i.established,
                            i.rss_before as f64 / 1e6,
                            i.rss_after as f64 / 1e6,
                            i.bytes_per_conn
                        );
                    }
                    None => {
                        let _ = writeln!(s, "| {} | {} | | | | |", t.target.name(), t.status);
                    }
                }
            }
        } else {
            let _ = writeln!(s, "Load: {}.\n", sc.load);
            let _ = writeln!(s, "| server | status | sessions/s | requests/s | failures | resumed | latency mean / p99 ms | CPU µs/conn | CPU µs/req |\n|---|---|---:|---:|---:|---:|---:|---:|---:|");
            for t in &sc.targets {
                match &t.median {
                    Some(m) => {
                        let l = &m.load;
                        let _ = writeln!(s, "| {} | {} | {:.0} | {:.0} | {:.3} % | {:.0} % | {:.2} / {:.2} | {:.1} | {:.1} |", t.target.name(), t.status, l.conns_per_s, l.requests_per_s, l.failure_ratio * 100.0, l.resumed_share * 100.0, l.session_ms.mean, l.session_ms.p99, m.cpu_us_per_conn, m.cpu_us_per_req);
                    }
                    None => {
                        let _ = writeln!(s, "| {} | {} | | | | | | | |", t.target.name(), t.status);
                    }
                }
            }
        }
        if let Some((_, p)) = plots.iter().find(|(n, _)| *n == sc.scenario.name) {
            let file = p.file_name().and_then(|f| f.to_str()).unwrap_or("");
            let _ = writeln!(s, "\n![{}]({file})", sc.scenario.name);
        }
    }
    if !fonts {
        let _ = writeln!(
            s,
            "\n(No plots: no TrueType font found; install fonts-dejavu-core.)"
        );
    }
    s
}

fn load_font() -> bool {
    for p in [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
    ] {
        if let Ok(bytes) = std::fs::read(p) {
            // Registered once for the life of the process, as plotters requires.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            return plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok();
        }
    }
    false
}

fn plot(sc: &ScenarioResult, path: &Path) -> anyhow::Result<()> {
    let bars: Vec<(String, f64)> = sc
        .targets
        .iter()
        .filter_map(|t| figure(sc, t).map(|f| (t.target.name().to_owned(), f)))
        .collect();
    anyhow::ensure!(!bars.is_empty(), "nothing to plot");
    let unit = if sc.scenario.idle {
        "bytes per idle connection"
    } else if matches!(criterion(sc.scenario.name), Some(("CPU µs/req", _))) {
        "server CPU µs per request"
    } else {
        "server CPU µs per connection"
    };
    let max = bars.iter().map(|b| b.1).fold(0.0, f64::max).max(1e-9);
    let root = SVGBackend::new(path, (720, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{}: {}", sc.scenario.name, unit),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(70)
        .build_cartesian_2d((0..bars.len()).into_segmented(), 0.0..max * 1.15)?;
    let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                names.get(*i).cloned().unwrap_or_default()
            }
            SegmentValue::Last => String::new(),
        })
        .y_desc(unit)
        .draw()?;
    chart.draw_series(bars.iter().enumerate().map(|(i, (name, v))| {
        let color = if name == "shuck" {
            RGBColor(200, 80, 40)
        } else {
            RGBColor(90, 110, 160)
        };
        let mut r = Rectangle::new(
            [
                (SegmentValue::Exact(i), 0.0),
                (SegmentValue::Exact(i + 1), *v),
            ],
            color.filled(),
        );
        r.set_margin(0, 0, 12, 12);
        r
    }))?;
    root.present()?;
    Ok(())
}
