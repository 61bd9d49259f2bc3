//! The `flint` command.

use clap::Parser;

/// flint: a zero-copy task-launch control plane (driver, executors, and the RPC
/// transport under them).
///
/// The driver, executor and job commands arrive with the scheduler and executor crates;
/// this build offers `--version` and `help`.
#[derive(Debug, Parser)]
#[command(name = "flint", version, about, long_about = None)]
struct Cli {}

fn main() {
    let Cli {} = Cli::parse();
    println!(
        "flint {} (wire protocol version {}); run `flint --help` for usage",
        env!("CARGO_PKG_VERSION"),
        flint::wire::PROTOCOL_VERSION
    );
}
