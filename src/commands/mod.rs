//! The subcommands. This is the binary's edge: commands return `anyhow` errors, and
//! [`BadInput`] marks the ones that are the user's input (exit code 2, not 1).

pub mod attach;
pub mod demo;
pub mod detach;
pub mod estimate;
pub mod export;
pub mod init;
mod job;
pub mod probe;
pub mod providers;
pub mod run;
mod scan_line;
mod shard;
mod signals;
pub mod sim;
pub mod status;
pub(crate) mod stdout;

pub use stdout::failure as stdout_failure;
pub mod stop;
pub mod template;

/// An error caused by the user's input (a config, a flag, a file): exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// Exit codes (SPEC §1).
pub mod exit {
    pub const OK: u8 = 0;
    pub const FAILURE: u8 = 1;
    pub const BAD_INPUT: u8 = 2;
    /// A scheduler's SIGTERM stopped the run before it was done (Slurm's `--time`, a
    /// preemption, Kubernetes deleting the pod): it drained and resumes when run again. 75 is
    /// sysexits.h's EX_TEMPFAIL ("try again later"); the shipped sbatch script requeues on it
    /// and the Job's podFailurePolicy retries it without counting (deploy/).
    pub const RESUMABLE: u8 = 75;
    /// The terminal or the output went away (SIGHUP, a closed pipe): the run drained.
    pub const HANGUP: u8 = 129;
    /// The operator stopped the run (Ctrl-C, `q`, `harvest stop`).
    pub const INTERRUPTED: u8 = 130;
}

/// The exit code for an error returned by a command.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    if err.chain().any(|e| e.is::<BadInput>()) {
        exit::BAD_INPUT
    } else {
        exit::FAILURE
    }
}

/// `harvest completions SHELL`: the script, written as `run` writes (a closed pipe is quiet).
pub fn completions(shell: clap_complete::Shell) -> u8 {
    use clap::CommandFactory;
    let mut script = Vec::new();
    clap_complete::generate(
        shell,
        &mut crate::cli::Cli::command(),
        "harvest",
        &mut script,
    );
    run::Out::default().write(&String::from_utf8_lossy(&script));
    exit::OK
}

/// Man pages from the clap definitions: harvest(1) on standard output, or (`dir`) harvest.1
/// and one page per command, `harvest-<command>.1`, written there.
pub fn man(dir: Option<&std::path::Path>) -> anyhow::Result<()> {
    use clap::CommandFactory;
    let cmd = crate::cli::Cli::command();
    let Some(dir) = dir else {
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut page)?;
        run::Out::default().write(&String::from_utf8_lossy(&page));
        return Ok(());
    };
    std::fs::create_dir_all(dir)
        .map_err(|e| BadInput(format!("cannot create {}: {e}", dir.display())))?;
    let mut written = 0;
    let mut write = |name: String, page: clap::Command| -> anyhow::Result<()> {
        let path = dir.join(format!("{name}.1"));
        let mut bytes = Vec::new();
        clap_mangen::Man::new(page)
            .title(name.to_uppercase())
            .render(&mut bytes)?;
        std::fs::write(&path, bytes)
            .map_err(|e| BadInput(format!("cannot write {}: {e}", path.display())))?;
        written += 1;
        Ok(())
    };
    for sub in cmd.get_subcommands().filter(|c| !c.is_hide_set()) {
        let name = format!("harvest-{}", sub.get_name());
        let page = sub.clone().bin_name(format!("harvest {}", sub.get_name()));
        write(name, page)?;
    }
    write("harvest".into(), cmd)?;
    run::Out::default().line(&format!(
        "harvest: {written} man pages in {}",
        dir.display()
    ));
    Ok(())
}

/// An error and its causes on one line, each cause said once: a message that already quotes
/// its source (`cannot read {path}: {source}`) is not followed by it again (`File exists (os
/// error 17): File exists (os error 17)`).
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let said = cause.to_string();
        if text.contains(&said) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&said);
    }
    text
}

#[cfg(test)]
mod error_text_tests {
    use super::error_text;

    #[test]
    fn each_cause_is_said_once() {
        let io = std::io::Error::from_raw_os_error(17);
        let quoted = anyhow::Error::new(crate::export::template::TemplateError::Read {
            path: "t.jinja".into(),
            source: std::io::Error::from_raw_os_error(17),
        });
        assert_eq!(error_text(&quoted), format!("cannot read t.jinja: {io}"));
        let chained = anyhow::Error::new(std::io::Error::from_raw_os_error(2)).context("loading x");
        assert_eq!(
            error_text(&chained),
            format!("loading x: {}", std::io::Error::from_raw_os_error(2))
        );
    }
}
