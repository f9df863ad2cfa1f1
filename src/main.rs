//! The `harvest` binary: parse the command line, run a command, map errors to exit codes
//! (0 done, 1 runtime failure or standard output unwritable, 2 bad config or input, 75 stopped
//! by a scheduler's SIGTERM and resumable, 129 terminal or output lost, 130 interrupted by the
//! operator).

use std::process::ExitCode;

use clap::Parser;
use harvest::cli::{Cli, Command};
use harvest::commands::{self, exit};

fn main() -> ExitCode {
    // Before anything reads the key (the environment, a config): a crash must not write it to
    // a core file (reliability-probe-5 P6).
    for failed in harvest::hardening::no_core_dumps() {
        eprintln!("harvest: warning: {failed}");
    }
    let cli = Cli::parse();
    // `run` (and `attach`, whose TUI owns the screen) log to a file in the output directory;
    // the others to stderr.
    if !matches!(
        cli.command,
        Command::Run(_) | Command::Demo(_) | Command::Attach(_)
    ) {
        harvest::logging::to_stderr();
    }
    harvest::raise_open_files_limit();
    // The simulator may use both cores; the client side is cheapest on one thread, and a run
    // batches its wake-ups when busy (harvest::runtime).
    let rt = match &cli.command {
        Command::Sim(_) => harvest::runtime::multi_thread(),
        Command::Run(a) => harvest::runtime::current_thread(Some(
            std::time::Duration::from_millis(a.read_batch_ms),
        )),
        _ => harvest::runtime::current_thread(None),
    };
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("harvest: cannot start the async runtime: {e}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    let result = rt.block_on(async {
        match cli.command {
            // A detached run: its launcher, or the engine it spawned (`commands/detach.rs`).
            Command::Run(a) if a.detached_child => commands::detach::background(&a).await,
            Command::Run(a) if a.detach => commands::detach::spawn(&a).await,
            Command::Run(a) if a.check => commands::run::check(&a).await.map(|()| exit::OK),
            Command::Run(a) => commands::run::run(a).await,
            Command::Status(a) => commands::status::run(a).await.map(|()| exit::OK),
            Command::Attach(a) => commands::attach::run(a).await,
            Command::Stop(a) => commands::stop::run(a).await,
            Command::Providers(a) => commands::providers::run(a).await.map(|()| exit::OK),
            Command::Estimate(a) => commands::estimate::run(a).await.map(|()| exit::OK),
            Command::Export(a) => commands::export::run(a).map(|()| exit::OK),
            Command::Probe(a) => commands::probe::run(a).await.map(|()| exit::OK),
            Command::Sim(a) => commands::sim::run(a).await.map(|()| exit::OK),
            Command::Demo(a) => commands::demo::run(a).await,
            Command::Init(a) => commands::init::run(a).await.map(|()| exit::OK),
            Command::Template(a) => Ok(commands::template::run(&a)),
            Command::Completions(a) => Ok(commands::completions(a.shell)),
            Command::Man(a) => commands::man(a.dir.as_deref()).map(|()| exit::OK),
        }
    });
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!(
                "harvest: {}",
                harvest::printable::printable(&commands::error_text(&e))
            );
            commands::exit_code(&e)
        }
    };
    // What was printed is incomplete (a full disk, `> /dev/full`): a command that did its work
    // still fails, so that `harvest template print X > X.jinja && ...` stops there. A closed
    // pipe is the reader's choice and is not counted (commands/stdout.rs).
    match commands::stdout_failure() {
        Some(why) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "harvest: {why}");
            ExitCode::from(if code == exit::OK {
                exit::FAILURE
            } else {
                code
            })
        }
        None => ExitCode::from(code),
    }
}
