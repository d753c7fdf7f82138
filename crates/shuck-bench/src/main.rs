//! The `shuck-bench` binary: its options and subcommands are the library's (`lib.rs`).

use clap::Parser;

fn main() -> anyhow::Result<()> {
    shuck_bench::run(shuck_bench::Cli::parse())
}
