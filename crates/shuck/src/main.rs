//! The `shuck` binary: parse, validate, run. Every start-up error is one line on stderr and
//! exit status 2.

use std::process::ExitCode;

use clap::Parser;
use shuck::config::{self, Cli, Config};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            // clap's own rendering spans several lines; keep the first, which names the fault.
            let rendered = e.render().to_string();
            let first = rendered.lines().next().unwrap_or("bad command line");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("shuck: error: {first} (see shuck --help)");
            return ExitCode::from(2);
        }
    };
    init_logging(config::log_level(&cli));
    let config = match Config::from_cli(&cli) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    match shuck::runtime::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

fn fail(e: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("shuck: error: {e}");
    ExitCode::from(2)
}

fn init_logging(level: tracing::level_filters::LevelFilter) {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_max_level(level)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}
