//! The command line and its configuration file, merged: what `shuck` starts with, and what a
//! reload reads again (the same arguments, the file read anew), so that a reload never
//! calls back into the binary.

use std::ffi::OsString;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};

use super::{file, Cli, Config};

/// Why the command line gave no configuration.
#[derive(Debug)]
pub enum ArgsError {
    /// `--help` or `--version`: clap's text, to print; the exit status is 0.
    Printed(clap::Error),
    /// What is wrong, in one line.
    Invalid(String),
}

/// The command line, with `--config`'s file read in first (flags given on the command
/// line win over the file's keys).
pub fn parse(raw: &[OsString]) -> Result<Cli, ArgsError> {
    let matches = Cli::command()
        .try_get_matches_from(raw)
        .map_err(clap_fail)?;
    let cli = Cli::from_arg_matches(&matches).map_err(clap_fail)?;
    let Some(path) = &cli.config else {
        return Ok(cli.unset_empty());
    };
    let on_command_line = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    let from_file =
        file::load(path, &on_command_line).map_err(|e| ArgsError::Invalid(e.to_string()))?;
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

fn clap_fail(e: clap::Error) -> ArgsError {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        return ArgsError::Printed(e);
    }
    ArgsError::Invalid(format!("{} (see shuck --help)", file::clap_reason(&e)))
}

/// Where the configuration comes from: the command line shuck was started with. A reload
/// (SIGHUP) reads it, and the file it names, again.
#[derive(Debug, Clone)]
pub struct Source {
    args: Vec<OsString>,
}

impl Source {
    /// The configuration of `args` (the program name first, as `std::env::args_os`).
    pub fn new(args: Vec<OsString>) -> Self {
        Source { args }
    }

    /// The command line, as one line (the admin API's status).
    pub fn describe(&self) -> String {
        self.args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Parses the command line and its file again and builds the configuration.
    pub fn read(&self) -> Result<Config, String> {
        match parse(&self.args) {
            Ok(cli) => Config::from_cli(&cli).map_err(|e| e.to_string()),
            Err(ArgsError::Printed(_)) => Err("unexpected --help or --version".into()),
            Err(ArgsError::Invalid(e)) => Err(e),
        }
    }
}
