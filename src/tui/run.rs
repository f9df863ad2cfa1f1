//! The driver: owns the terminal, reads keys and snapshots, runs [`update`] and its effects,
//! and draws. Input redraws at once; snapshots mark the screen dirty and are drawn at most
//! ~5 times a second. Each frame is one synchronized update (no tearing over ssh or tmux); a
//! resize or regained focus (a tmux reattach) repaints the whole screen.

use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossterm::event::{
    DisableFocusChange, DisableMouseCapture, EnableFocusChange, Event, EventStream,
};
use crossterm::execute;
use crossterm::terminal::{BeginSynchronizedUpdate, EndSynchronizedUpdate};
use futures::StreamExt;
use ratatui::DefaultTerminal;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::engine::control::{Command, ShutdownMode};
use crate::engine::snapshot::Snapshot;

use super::state::UiState;
use super::theme::Theme;
use super::update::{Msg, UiEffect, shows_change, update};
use super::view;

/// Time between two frames drawn for snapshots alone.
const FRAME: Duration = Duration::from_millis(200);

/// How the TUI ended.
#[derive(Clone, Debug)]
pub struct TuiExit {
    /// The last snapshot it saw.
    pub last: Arc<Snapshot>,
    /// The shutdown the operator asked for, if they did (else the run ended, or the engine
    /// closed its snapshot channel).
    pub requested: Option<ShutdownMode>,
    /// Frames drawn, and for how long the TUI ran.
    pub frames: u64,
    pub seconds: f64,
    /// The terminal went away (reading or drawing failed, input ended, SIGHUP): why.
    pub lost: Option<String>,
    /// The engine closed the snapshot channel (its run ended, or, attached, the connection
    /// to it did).
    pub closed: bool,
}

impl TuiExit {
    /// The TUI ended because its terminal went away.
    pub fn lost(last: Arc<Snapshot>, why: &str) -> TuiExit {
        TuiExit {
            last,
            requested: None,
            frames: 0,
            seconds: 0.0,
            lost: Some(why.to_string()),
            closed: false,
        }
    }
}

/// Whether a [`TerminalGuard`] holds the terminal (for the panic hook).
static ACTIVE: AtomicBool = AtomicBool::new(false);
static HOOK: std::sync::Once = std::sync::Once::new();

/// Raw mode and the alternate screen for as long as it lives; restored on drop and on panic.
struct TerminalGuard {
    /// Not dropped by Rust: ratatui's `Terminal` prints to stderr when it cannot show the
    /// cursor on drop, and printing to a vanished terminal panics. `Drop` restores by hand.
    terminal: std::mem::ManuallyDrop<DefaultTerminal>,
    /// Frames drawn so far (logged at exit: an idle run should draw about one a second).
    frames: u64,
}

impl TerminalGuard {
    fn enter() -> io::Result<Self> {
        // `try_init` chains ratatui's own hook (restore) in front of the existing one; ours,
        // chained in front of that, also turns focus reporting off.
        let terminal = match ratatui::try_init() {
            Ok(t) => t,
            Err(e) => {
                ratatui::restore();
                return Err(e);
            }
        };
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                if ACTIVE.swap(false, Ordering::SeqCst) {
                    let _ = execute!(io::stdout(), DisableFocusChange);
                }
                previous(info);
            }));
        });
        ACTIVE.store(true, Ordering::SeqCst);
        let guard = TerminalGuard {
            terminal: std::mem::ManuallyDrop::new(terminal),
            frames: 0,
        };
        // Mouse capture stays off so that tmux copy mode and terminal selection work.
        execute!(io::stdout(), DisableMouseCapture, EnableFocusChange)?;
        Ok(guard)
    }

    fn draw(&mut self, state: &UiState) -> io::Result<()> {
        self.frames += 1;
        execute!(self.terminal.backend_mut(), BeginSynchronizedUpdate)?;
        let drawn = self.terminal.draw(|f| view::render(f, state)).map(|_| ());
        // End the update even when drawing failed, so the terminal does not stay frozen.
        let ended = execute!(self.terminal.backend_mut(), EndSynchronizedUpdate);
        drawn
            .and(ended)
            .and_then(|()| self.terminal.backend_mut().flush())
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        if ACTIVE.swap(false, Ordering::SeqCst) {
            let _ = execute!(io::stdout(), DisableFocusChange);
        }
        // Errors are ignored: the terminal may be gone (an ssh drop), and nothing may print.
        let _ = self.terminal.show_cursor();
        let _ = ratatui::try_restore();
        // The terminal's own drop would only retry the cursor and print why it failed; its
        // memory goes with the process.
    }
}

/// A TUI attached to an engine in another process (`harvest attach`).
pub struct Remote {
    /// The engine's pid.
    pub pid: u32,
    /// Viewers attached before this one.
    pub others: u32,
    /// Why the engine did not take a command: shown in the footer.
    pub notices: mpsc::Receiver<String>,
    /// Said in the footer instead of whose run this is (a viewer attached again).
    pub said: Option<String>,
}

/// Runs the TUI until the operator's shutdown has finished (the snapshot says Stopped or
/// Done), the operator quits a finished run (or, attached, detaches), or the engine closes
/// its snapshot channel. Commands are sent with `try_send`: a full channel never blocks the
/// UI; it says so instead.
pub async fn run_tui(
    commands: mpsc::Sender<Command>,
    mut snapshots: watch::Receiver<Arc<Snapshot>>,
    remote: Option<Remote>,
) -> io::Result<TuiExit> {
    let first = snapshots.borrow_and_update().clone();
    let mut state = UiState::new(first, Theme::from_env());
    let mut notices = None;
    if let Some(r) = remote {
        state.attached = Some(r.pid);
        state.set_status(r.said.clone().unwrap_or_else(|| attached_status(&r)));
        notices = Some(r.notices);
    }
    let term = TerminalGuard::enter()?;
    let size = term.terminal.size()?;
    update(&mut state, Msg::Resize(size.width, size.height));
    let mut ui = Session {
        state,
        term,
        // Dropped as soon as the terminal fails: its reader thread would otherwise poll a
        // dead terminal in a loop.
        input: Some(EventStream::new()),
        notices,
        dirty: false,
        started: Instant::now(),
        last_draw: Instant::now(),
    };
    if let Err(e) = ui.term.draw(&ui.state) {
        return Ok(ui.exit(Some(format!("drawing failed: {e}"))));
    }
    ui.last_draw = Instant::now();
    loop {
        let msg = match ui.next_msg(&mut snapshots).await {
            Ok(Some(msg)) => msg,
            Ok(None) => continue,
            Err(exit) => return Ok(exit),
        };
        if let Some(exit) = ui.apply(msg, &commands) {
            return Ok(exit);
        }
    }
}

/// The footer's first line when attached: whose run, and who else watches it.
fn attached_status(r: &Remote) -> String {
    format!(
        "attached to the run of pid {}{}; q to leave (the run goes on)",
        r.pid,
        match r.others {
            0 => String::new(),
            1 => ", with 1 other viewer".to_string(),
            n => format!(", with {n} other viewers"),
        }
    )
}

/// One TUI session: the screen's state, the terminal and what feeds it.
struct Session {
    state: UiState,
    term: TerminalGuard,
    input: Option<EventStream>,
    /// Why an attached engine did not take a command.
    notices: Option<mpsc::Receiver<String>>,
    /// A snapshot changed what is on screen since the last frame.
    dirty: bool,
    started: Instant,
    last_draw: Instant,
}

impl Session {
    /// How the TUI ended, with `lost` saying why the terminal went away, if it did.
    fn exit(&self, lost: Option<String>) -> TuiExit {
        let seconds = self.started.elapsed().as_secs_f64();
        let frames = self.term.frames;
        tracing::info!("TUI: {frames} frames in {seconds:.1} s");
        TuiExit {
            last: self.state.snapshot.clone(),
            requested: self.state.shutdown,
            frames,
            seconds,
            lost,
            closed: false,
        }
    }

    /// Draws a frame now.
    fn draw(&mut self) -> Result<(), TuiExit> {
        if let Err(e) = self.term.draw(&self.state) {
            return Err(self.exit(Some(format!("drawing failed: {e}"))));
        }
        self.last_draw = Instant::now();
        self.dirty = false;
        Ok(())
    }

    /// Waits for the next key, resize, notice, snapshot or due frame: a message for
    /// [`update`], nothing (handled here), or the end of the session.
    async fn next_msg(
        &mut self,
        snapshots: &mut watch::Receiver<Arc<Snapshot>>,
    ) -> Result<Option<Msg>, TuiExit> {
        let next_frame = self.last_draw + FRAME;
        let input = &mut self.input;
        let notices = &mut self.notices;
        tokio::select! {
            ev = async {
                match input.as_mut() {
                    Some(i) => i.next().await,
                    None => std::future::pending().await,
                }
            } => self.on_terminal(ev),
            Some(note) = async {
                match notices.as_mut() {
                    Some(n) => n.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                self.state.set_status(note);
                self.dirty = true;
                Ok(None)
            }
            changed = snapshots.changed() => match changed {
                Ok(()) => Ok(Some(Msg::Snapshot(snapshots.borrow_and_update().clone()))),
                Err(_) => {
                    let mut e = self.exit(None);
                    e.closed = true;
                    Err(e)
                }
            },
            () = tokio::time::sleep_until(next_frame), if self.dirty => self.draw().map(|()| None),
        }
    }

    /// What the terminal sent.
    fn on_terminal(&mut self, ev: Option<io::Result<Event>>) -> Result<Option<Msg>, TuiExit> {
        match ev {
            Some(Ok(Event::Key(k))) => Ok(Some(Msg::Key(k))),
            Some(Ok(Event::Resize(w, h))) => {
                let t = &mut self.term.terminal;
                if let Err(e) = t.autoresize().and_then(|()| t.clear()) {
                    return Err(self.exit(Some(format!("resizing failed: {e}"))));
                }
                Ok(Some(Msg::Resize(w, h)))
            }
            Some(Ok(Event::FocusGained)) => {
                // A tmux reattach: the screen may hold anything; repaint all of it.
                if let Err(e) = self.term.terminal.clear() {
                    return Err(self.exit(Some(format!("drawing failed: {e}"))));
                }
                self.dirty = true;
                let now = Instant::now();
                self.last_draw = now.checked_sub(FRAME).unwrap_or(now);
                Ok(None)
            }
            Some(Ok(_)) => Ok(None),
            // The terminal is gone (an ssh drop without tmux: EIO, or end of input).
            Some(Err(e)) => {
                drop(self.input.take());
                Err(self.exit(Some(format!("reading the terminal failed: {e}"))))
            }
            None => {
                drop(self.input.take());
                Err(self.exit(Some("the terminal closed its input".into())))
            }
        }
    }

    /// Runs `msg` through [`update`], performs its effects and draws: input at once,
    /// snapshots at the next frame. Returns the session's end when an effect ends it.
    fn apply(&mut self, msg: Msg, commands: &mpsc::Sender<Command>) -> Option<TuiExit> {
        let at_once = !matches!(msg, Msg::Snapshot(_));
        // A snapshot that changes nothing on screen (most of an idle run's) draws no frame.
        let visible = match &msg {
            Msg::Snapshot(new) => shows_change(&self.state.snapshot, new),
            _ => true,
        };
        let status_before = self.state.status.is_some();
        for effect in update(&mut self.state, msg) {
            match effect {
                UiEffect::Send(cmd) => self.send(cmd, commands),
                UiEffect::Quit => return Some(self.exit(None)),
            }
        }
        if at_once {
            return self.draw().err();
        }
        if visible || status_before != self.state.status.is_some() {
            self.dirty = true;
        }
        None
    }

    /// Sends a command to the engine without waiting; says so when it was not taken.
    fn send(&mut self, cmd: Command, commands: &mpsc::Sender<Command>) {
        match commands.try_send(cmd) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(cmd)) => {
                if matches!(cmd, Command::Shutdown(_)) {
                    // Not sent: do not wait for a shutdown that is not coming.
                    self.state.shutdown = None;
                }
                self.state
                    .set_status("the engine is busy: command not sent; try again");
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.state
                    .set_status("the engine has stopped taking commands");
            }
        }
    }
}
