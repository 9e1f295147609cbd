//! The `sluice` command line: parses flags into plain option structs (the "low" layer) and
//! hands them to a command module, which validates them into a plan (the "high" layer). Errors
//! reach this file as `anyhow` chains or `Failure`s and leave as one message and a
//! documented exit code:
//!
//! | code | meaning |
//! |------|---------|
//! | 0 | success |
//! | 1 | an unexpected local failure (I/O, a bug) |
//! | 2 | usage: bad flags, a malformed target, unknown table or column, unknown format |
//! | 3 | bad input: a row was rejected, by sluice or by the server; nothing was committed |
//! | 4 | cannot connect or authenticate |
//! | 5 | the server failed for a reason not tied to one row |
//! | 6 | loaded, with rows rejected within `--max-errors` |
//! | 130, 143 | interrupted by Ctrl-C or SIGTERM (128 + the signal) |

mod commands;
mod destination;
mod failure;
mod faults;
mod host;
mod patterns;
mod progress;
mod report_html;
mod signals;
mod summary;
mod target;
mod tpch;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use failure::Failure;
use std::io::IsTerminal;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "sluice",
    version,
    about = "Load very large flat files into PostgreSQL as fast as the hardware allows.",
    long_about = "sluice converts TPC-H .tbl, CSV and text files to PostgreSQL's binary format on \
the client, streams them over parallel binary COPY connections, and commits everything or \
nothing. Every rejected row is reported with its file, line, byte offset, column, value and \
reason.\n\nWithout --target (and without PGHOST, PGDATABASE or DATABASE_URL in the environment) \
sluice uses its own private PostgreSQL cluster, started on demand.",
    after_help = "Exit codes: 0 success, 1 local failure (an input that cannot be read),
2 usage, 3 bad input row (nothing committed), 4 cannot connect, 5 server
failure (the same command resumes), 6 loaded with rows rejected within
--max-errors, 130 and 143 interrupted by Ctrl-C or SIGTERM (the same
command resumes). See `sluice load --help` to load files, `sluice demo`
for a first run."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
// Parsed once; boxing the biggest variant would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Command {
    /// Load files into PostgreSQL tables over parallel binary COPY (or MariaDB's, over LOAD DATA
    /// LOCAL: --target mariadb://...).
    Load(commands::load::LoadArgs),
    /// Generate benchmark data.
    #[command(subcommand)]
    Gen(commands::gen::GenCommand),
    /// Print or create benchmark schemas.
    #[command(subcommand)]
    Ddl(commands::ddl::DdlCommand),
    /// The private PostgreSQL cluster used when no target is given.
    Pg(commands::pg::PgArgs),
    /// Generate TPC-H, load it in parallel, verify it, query it: the whole job in one command.
    Demo(commands::demo::DemoArgs),
    /// Benchmark TPC-H loads over a sweep of --jobs, every run on a fresh server, verified.
    Bench(commands::bench::BenchArgs),
    /// The loads a target's resume ledger knows (state, chunks and rows done); forget one.
    Jobs(commands::jobs::JobsArgs),
    /// Preflight: round trip, upload and store rates on 1..N streams, this machine's parse
    /// rate; the expected bottleneck and the --jobs and --copy-buffer to give a load.
    Probe(commands::probe::ProbeArgs),
}

/// The exit code of a failure: the README's table, for every command, decided here alone.
fn exit_code(f: &Failure) -> u8 {
    match f {
        Failure::Local(_) | Failure::Aborted => 1,
        Failure::Usage(_) => 2,
        Failure::Input(_) => 3,
        Failure::Connect(_) => 4,
        Failure::Server(_) => 5,
        Failure::LoadedWithRejects(_) => 6,
        Failure::Exited(code) => *code,
    }
}

/// The command line with its help wrapped to the terminal, or to 80 columns when the output is
/// not a terminal (a pipe, a file), where clap would use 100.
fn command_line() -> clap::Command {
    let cmd = Cli::command();
    if std::io::stdout().is_terminal() {
        cmd
    } else {
        cmd.term_width(80)
    }
}

fn main() -> ExitCode {
    let cli = Cli::from_arg_matches(&command_line().get_matches()).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Command::Load(args) => commands::load::run(args),
        Command::Gen(cmd) => commands::gen::run(cmd),
        Command::Ddl(cmd) => commands::ddl::run(cmd),
        Command::Pg(args) => commands::pg::run(args),
        Command::Demo(args) => commands::demo::run(args),
        Command::Bench(args) => commands::bench::run(args),
        Command::Jobs(args) => commands::jobs::run(args),
        Command::Probe(args) => commands::probe::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            if !matches!(f, Failure::Exited(_) | Failure::LoadedWithRejects(_)) {
                eprintln!("error: {f}");
            }
            if let Failure::Input(_) = f {
                eprintln!(
                    "nothing was committed: fix the row (or the table) and run the command again"
                );
            }
            ExitCode::from(exit_code(&f))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Every command's help fits 80 columns (examples included: a wrapped example line
    /// would look like a second command), and every flag says what it does.
    #[test]
    fn help_fits_80_columns_and_describes_every_flag() {
        fn visit(cmd: &mut clap::Command, path: &str) {
            let mut cmd = cmd.clone().term_width(80);
            let help = cmd.render_help().to_string();
            for line in help.lines() {
                assert!(
                    line.chars().count() <= 80,
                    "`{path} --help` has a line over 80 columns:\n{line}"
                );
            }
            // Hand-written lines (examples) must not be wrapped by clap at all.
            if let Some(after) = cmd.get_after_help() {
                for line in after.to_string().lines() {
                    assert!(
                        line.chars().count() <= 76,
                        "`{path} --help`: this line would wrap at 80 columns:\n{line}"
                    );
                }
            }
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                assert!(
                    arg.get_help().is_some(),
                    "`{path}`: --{id} has no description"
                );
            }
            for sub in cmd.get_subcommands_mut() {
                let name = format!("{path} {}", sub.get_name());
                assert!(sub.get_about().is_some(), "`{name}` has no description");
                visit(sub, &name);
            }
        }
        visit(&mut Cli::command(), "sluice");
    }
}
