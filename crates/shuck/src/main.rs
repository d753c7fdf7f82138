//! The `shuck` binary: parse, validate, run. Every start-up error is one line on stderr and
//! exit status 1, as hitch.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};
use shuck::config::{self, Cli, Config};
use shuck::system::log::{self, LogFormat, Sink};

fn main() -> ExitCode {
    let raw: Vec<OsString> = std::env::args_os().collect();
    let cli = match parse(&raw) {
        Ok(cli) => cli,
        Err(Fail::Printed) => return ExitCode::SUCCESS,
        Err(Fail::Error(e)) => return fail(&e),
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
        return ExitCode::SUCCESS;
    }
    // SIGHUP reads the same command line and file again.
    let reparse: shuck::runtime::Reparse = std::rc::Rc::new(move || match parse(&raw) {
        Ok(cli) => Config::from_cli(&cli).map_err(|e| e.to_string()),
        Err(Fail::Printed) => Err("unexpected --help".into()),
        Err(Fail::Error(e)) => Err(e),
    });
    match shuck::runtime::run(config, reparse) {
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

/// Why the command line did not give a configuration.
enum Fail {
    /// --help or --version: printed, exit 0.
    Printed,
    /// One line naming what is wrong.
    Error(String),
}

/// The command line, with `--config`'s file read in first (flags given on the command
/// line win over the file's keys).
fn parse(raw: &[OsString]) -> Result<Cli, Fail> {
    let matches = Cli::command()
        .try_get_matches_from(raw)
        .map_err(clap_fail)?;
    let cli = Cli::from_arg_matches(&matches).map_err(clap_fail)?;
    let Some(path) = &cli.config else {
        return Ok(cli.unset_empty());
    };
    let on_command_line = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    let from_file =
        config::file::load(path, &on_command_line).map_err(|e| Fail::Error(e.to_string()))?;
    let mut all: Vec<OsString> = raw.iter().take(1).cloned().collect();
    all.extend(from_file.args.into_iter().map(OsString::from));
    all.extend(raw.iter().skip(1).cloned());
    let matches = Cli::command()
        .try_get_matches_from(&all)
        .map_err(clap_fail)?;
    let mut cli = Cli::from_arg_matches(&matches).map_err(clap_fail)?;
    cli.notes = from_file.notes;
    cli.file_places = Some(from_file.places);
    Ok(cli.unset_empty())
}

fn clap_fail(e: clap::Error) -> Fail {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return Fail::Printed;
    }
    Fail::Error(format!(
        "{} (see shuck --help)",
        config::file::clap_reason(&e)
    ))
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
