//! tmux driven from the end-to-end tests: each test file has its own tmux server (`-L`), so
//! tests running side by side never touch each other's sessions; panes are read as text with
//! `capture-pane`, as a person would read them.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// One private tmux server; killed when dropped.
pub struct Tmux {
    socket: &'static str,
}

impl Tmux {
    /// The server named `socket`, cleared of anything an earlier run left.
    pub fn new(socket: &'static str) -> Tmux {
        let t = Tmux { socket };
        let _ = t.run(&["kill-server"]);
        t
    }

    /// Whether tmux is installed. `.ci/run` installs it, and there these tests must run.
    pub fn available() -> bool {
        Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success())
    }

    pub fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", self.socket])
            .args(args)
            .output()
            .expect("tmux is installed (.ci/run installs it)")
    }

    /// A detached session of 160x48 running `cmd` (with `env` set in it).
    pub fn session(&self, name: &str, env: &[String], cmd: &str) {
        let mut args = vec!["new-session", "-d", "-s", name, "-x", "160", "-y", "48"];
        for e in env {
            args.extend(["-e", e.as_str()]);
        }
        args.push(cmd);
        let started = self.run(&args);
        assert!(started.status.success(), "{started:?}");
    }

    /// The pane of `target` as text.
    pub fn screen(&self, target: &str) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", target]).stdout).to_string()
    }

    /// The screen of `target` once `check` holds, polling until `deadline`.
    pub async fn wait_for(
        &self,
        target: &str,
        what: &str,
        deadline: Instant,
        check: impl Fn(&str) -> bool,
    ) -> String {
        loop {
            let s = self.screen(target);
            if check(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what} in {target}; screen:\n{s}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// tmux is missing: fails under CI and `.ci/run` (which installs it), else says on the terminal
/// that `what` did not run (`crate::common::cannot_check`).
pub fn missing(what: &str) {
    crate::common::cannot_check(&format!(
        "tmux is not installed (apt-get install tmux): {what} did not run"
    ));
}
