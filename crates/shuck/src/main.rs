//! The `shuck` binary: parse, validate, run. Every start-up error is one line on stderr and
//! exit status 1, as hitch.

use std::ffi::OsString;
use std::process::ExitCode;

use shuck::config::args::{self, ArgsError, Source};
use shuck::config::{self, Cli, Config};
use shuck::system::log::{self, LogFormat, Sink};

/// mimalloc rather than glibc's malloc: what it saves per HTTP/2 request and costs per idle
/// connection is in bench/RESULTS.md ("HTTP/2 gateways").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let raw: Vec<OsString> = std::env::args_os().collect();
    // `shuck ctl …` asks a running shuck; everything else is hitch's command line.
    if raw.get(1).is_some_and(|a| a == "ctl") {
        return shuck::ctl::main(&raw[1..]);
    }
    let cli = match args::parse(&raw) {
        Ok(cli) => cli,
        Err(ArgsError::Printed(help)) => {
            let _ = help.print();
            return ExitCode::SUCCESS;
        }
        Err(ArgsError::Invalid(e)) => return fail(&e),
    };
    let sink = match log_sink(&cli) {
        Ok(s) => s,
        Err(e) => return fail(&e),
    };
    let to_stderr = matches!(sink, Sink::Stderr);
    let no_dev_log = sink
        .syslog_part()
        .and_then(|s| s.unreachable_at_start().map(str::to_owned));
    // JSON on stderr: a start-up error is one more object there, not a text line.
    let json_stderr = cli.log_format == LogFormat::Json && to_stderr;
    init_logging(config::log_level(&cli), sink, cli.log_format);
    if let Some(why) = no_dev_log {
        tracing::warn!(
            name: "syslog_unreachable",
            reason = %why,
            "--syslog: /dev/log cannot be reached ({why}); logging to stderr until it can (as hitch, shuck starts anyway)",
        );
    }
    if cli.daemon && to_stderr && !cli.test {
        tracing::warn!(
            name: "daemon_logs_nowhere",
            "--daemon without --syslog or --log-filename: nothing will be logged once detached",
        );
    }
    let config = match Config::from_cli(&cli) {
        Ok(c) => c,
        Err(e) if json_stderr => return fail_logged(&e),
        Err(e) => return fail(&e),
    };
    if cli.test {
        println!("shuck: configuration OK: {}", config.describe());
        for line in shuck::config::route::describe(&config) {
            println!("  {line}");
        }
        return ExitCode::SUCCESS;
    }
    // SIGHUP reads the same command line and file again.
    match shuck::runtime::run(config, Source::new(raw)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if json_stderr => fail_logged(&e),
        Err(e) => {
            // After --daemon, stderr is /dev/null: the log is where the operator looks.
            if !to_stderr {
                tracing::error!(name: "cannot_start", error = %e, "{e}");
            }
            fail(&e)
        }
    }
}

fn fail(e: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("shuck: error: {e}");
    ExitCode::FAILURE
}

/// A start-up error once logging is JSON on stderr: one more object there, not a text line.
fn fail_logged(e: &dyn std::fmt::Display) -> ExitCode {
    tracing::error!(name: "cannot_start", error = %e, "cannot start");
    ExitCode::FAILURE
}

/// stderr, `--log-filename`, `--syslog`, or both of the last two (as hitch takes them).
fn log_sink(cli: &Cli) -> Result<Sink, String> {
    let facility =
        || log::facility(&cli.syslog_facility).map_err(|e| format!("--syslog-facility: {e}"));
    match (&cli.log_filename, cli.syslog) {
        (Some(path), true) => Sink::both(path, facility()?).map_err(|e| e.to_string()),
        (Some(path), false) => Sink::file(path).map_err(|e| e.to_string()),
        (None, true) => Ok(Sink::syslog(facility()?)),
        (None, false) => Ok(Sink::Stderr),
    }
}

fn init_logging(level: tracing::level_filters::LevelFilter, sink: Sink, format: LogFormat) {
    use std::io::IsTerminal;
    let ansi = matches!(sink, Sink::Stderr) && std::io::stderr().is_terminal();
    let fmt = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_target(false)
        .with_writer(sink);
    match format {
        LogFormat::Text => fmt.with_ansi(ansi).init(),
        LogFormat::Json => fmt
            .with_ansi(false)
            .event_format(shuck::system::json_log::JsonLines)
            .init(),
    }
}
