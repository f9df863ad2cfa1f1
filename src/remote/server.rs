//! The engine's side of the control socket: listens on the output directory's socket while a
//! run lives; one task per connection. Each connection sends the latest snapshot only (at most
//! 5 a second, when it changed, and one a second at least), so a slow viewer skips snapshots
//! instead of queueing them, and one that does not read for [`WRITE_TIMEOUT`] is dropped with
//! a log line: no viewer can slow the engine, which only ever does a `send_replace`.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::engine::control::{Command, Viewer};
use crate::engine::snapshot::{RunState, Snapshot};

use super::wire::{self, ClientMsg, EngineMsg, Role, VERSION, encode, read_line};

/// The shortest time between two snapshots to one connection (5 a second at most).
pub const MIN_GAP: Duration = Duration::from_millis(200);
/// The longest time between two snapshots while the run lives (the elapsed clock moves).
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// A connection whose socket takes no bytes for this long is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// A client must say hello within this.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "{0} exists and is not a socket: move it away (harvest listens there for `harvest attach`)"
    )]
    InTheWay(PathBuf),
    #[error(
        "{dir} holds the control socket but {why}: another user could take the socket's place. \
         Remove it (harvest makes it again, private), or set XDG_RUNTIME_DIR"
    )]
    UnsafeDir { dir: PathBuf, why: String },
    #[error("cannot listen on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The listening socket of a run; [`ControlServer::close`] (or a drop) stops it and removes
/// the socket file.
pub struct ControlServer {
    path: PathBuf,
    /// Stops the accept loop.
    listening: CancellationToken,
    /// Ends the connections that are left.
    cancel: CancellationToken,
    tracker: TaskTracker,
}

/// Most connections served at once: each costs a task and a file descriptor, which the run's
/// streams need (reliability-probe-3 D10: a flood of 1,200 took the fds and failed requests).
/// The rest are refused at once.
const MAX_CONNECTIONS: usize = 64;

/// What every connection task shares.
struct Shared {
    commands: mpsc::Sender<Command>,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    viewers: AtomicU32,
    own_uid: u32,
    output_dir: String,
    cancel: CancellationToken,
}

/// A directory of this user alone: a real directory (not a link), owned by the effective
/// user, with no access for group or others.
fn private_dir(dir: &Path) -> Result<(), ServeError> {
    use std::os::unix::fs::MetadataExt;
    let unsafe_dir = |why: String| ServeError::UnsafeDir {
        dir: dir.to_path_buf(),
        why,
    };
    let meta = std::fs::symlink_metadata(dir).map_err(|source| ServeError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let me = rustix::process::geteuid().as_raw();
    if !meta.is_dir() {
        return Err(unsafe_dir("is not a directory (a link?)".into()));
    }
    if meta.uid() != me {
        return Err(unsafe_dir(format!(
            "is owned by uid {}, not by you (uid {me})",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(unsafe_dir(format!(
            "is open to other users (mode {:o})",
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

/// Listens for the run of `dir`. Call it with the output directory's lock held: a socket
/// file already there is a crashed run's, and is replaced.
pub fn serve(
    dir: &Path,
    commands: mpsc::Sender<Command>,
    snapshots: watch::Receiver<Arc<Snapshot>>,
) -> Result<ControlServer, ServeError> {
    let path = super::socket_path(dir);
    let io = |source| ServeError::Io {
        path: path.clone(),
        source,
    };
    if let Some(parent) = path.parent()
        && path.file_name() != Some(std::ffi::OsStr::new(super::SOCKET_NAME))
    {
        // The private fallback directory (a socket path too long for the output directory):
        // made 0700 when missing, and used only when it is still the user's own and private
        // (reliability-probe-3 D7: one pre-created by another user locked its owner out).
        if !parent.exists() {
            std::fs::create_dir_all(parent).map_err(io)?;
            std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
        }
        private_dir(parent)?;
    }
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(&path).map_err(io)?,
        Ok(_) => return Err(ServeError::InTheWay(path)),
        Err(_) => {}
    }
    let listener = UnixListener::bind(&path).map_err(io)?;
    // Only the owner may open it; the peer-uid check below holds even where modes do not.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    let cancel = CancellationToken::new();
    let listening = CancellationToken::new();
    let tracker = TaskTracker::new();
    let shared = Arc::new(Shared {
        commands,
        snapshots,
        viewers: AtomicU32::new(0),
        own_uid: super::own_uid(),
        output_dir: dir.display().to_string(),
        cancel: cancel.clone(),
    });
    let t = tracker.clone();
    let stop_listening = listening.clone();
    // Not tracked: `close` stops it first, then waits for the connections alone.
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = stop_listening.cancelled() => break,
                conn = listener.accept() => match conn {
                    Ok((stream, _)) => {
                        if t.len() >= MAX_CONNECTIONS {
                            // Said without waiting: a busy socket never blocks the loop.
                            let reason = format!(
                                "{MAX_CONNECTIONS} connections are open already; close one"
                            );
                            let _ = stream.try_write(&encode(&EngineMsg::Refused { reason }));
                            continue;
                        }
                        let shared = shared.clone();
                        t.spawn(async move { connection(stream, shared).await });
                    }
                    Err(e) => {
                        tracing::warn!("control socket: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
            }
        }
    });
    tracing::info!("control socket: listening on {}", path.display());
    Ok(ControlServer {
        path,
        listening,
        cancel,
        tracker,
    })
}

impl ControlServer {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops listening and removes the socket file, then gives each connection up to `grace`
    /// to send its last snapshot.
    pub async fn close(self, grace: Duration) {
        self.listening.cancel();
        // The file goes as the listening stops, not after the viewers' grace: in between, no
        // engine answers on it and the run may have let go of its directory already, so a
        // `status` would find a socket nobody serves (a loaded machine's #35 runs saw it).
        // The viewers already connected keep their connections.
        let _ = std::fs::remove_file(&self.path);
        self.tracker.close();
        // Connections end by themselves once the run's last snapshot is sent; those that do
        // not (a viewer that stopped reading) are cancelled after the grace.
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_err()
        {
            self.cancel.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(1), self.tracker.wait()).await;
        }
        // `Drop` removes the file and cancels the listener.
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.listening.cancel();
        self.cancel.cancel();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Counts a viewer for as long as it lives.
struct ViewerSeat<'a>(&'a AtomicU32);

impl Drop for ViewerSeat<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn write(w: &mut tokio::net::unix::OwnedWriteHalf, msg: &EngineMsg) -> Result<(), String> {
    match tokio::time::timeout(WRITE_TIMEOUT, w.write_all(&wire::encode(msg))).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("writing failed: {e}")),
        Err(_) => Err(format!("it read nothing for {} s", WRITE_TIMEOUT.as_secs())),
    }
}

/// Whether `new` shows anything `old` did not, the clocks aside.
fn changed(old: &Snapshot, new: &Snapshot) -> bool {
    old.state != new.state
        || old.events_total != new.events_total
        || old.done != new.done
        || old.rejected != new.rejected
        || old.in_flight != new.in_flight
        || old.spent != new.spent
        || old.accrued != new.accrued
        || old.booked != new.booked
        || old.worst_case != new.worst_case
        || old.concurrency_limit != new.concurrency_limit
        || old.datasets != new.datasets
        || old.endpoints != new.endpoints
        || old.inflight_budget != new.inflight_budget
}

fn is_over(s: &Snapshot) -> bool {
    matches!(s.state, RunState::Done | RunState::Stopped)
}

async fn connection(stream: UnixStream, shared: Arc<Shared>) {
    let cred = stream.peer_cred();
    let (rd, mut wr) = stream.into_split();
    let pid = cred
        .as_ref()
        .ok()
        .and_then(|c| c.pid())
        .map_or(0, |p| p.unsigned_abs());
    let uid = cred.as_ref().map(|c| c.uid()).ok();
    if !uid.is_some_and(|u| super::peer_allowed(u, shared.own_uid)) {
        tracing::warn!(
            "control socket: refused pid {pid}: uid {uid:?} is not the run's ({})",
            shared.own_uid
        );
        let reason = "this run belongs to another user".to_string();
        let _ = write(&mut wr, &EngineMsg::Refused { reason }).await;
        return;
    }
    let mut reader = BufReader::new(rd);
    let Some(role) = greet(&shared, &mut reader, &mut wr).await else {
        return;
    };
    let _seat = (role == Role::Viewer).then(|| {
        let n = shared.viewers.fetch_add(1, Ordering::SeqCst) + 1;
        tracing::info!("control socket: viewer pid {pid} attached ({n} attached)");
        ViewerSeat(&shared.viewers)
    });
    let end = match serve_client(&shared, pid, reader, &mut wr).await {
        Ok(end) => end,
        Err(why) => {
            tracing::info!("control socket: pid {pid} dropped: {why}");
            return;
        }
    };
    if role == Role::Viewer {
        tracing::info!("control socket: viewer pid {pid} left: {end}");
    }
    let _ = wr.shutdown().await;
}

type Reader = BufReader<tokio::net::unix::OwnedReadHalf>;
type Writer = tokio::net::unix::OwnedWriteHalf;

/// The engine's hello, then the client's: its role, or `None` when it was refused or left.
async fn greet(shared: &Shared, reader: &mut Reader, wr: &mut Writer) -> Option<Role> {
    let hello = EngineMsg::Hello {
        version: VERSION,
        harvest: env!("CARGO_PKG_VERSION").to_string(),
        pid: std::process::id(),
        output_dir: shared.output_dir.clone(),
        viewers: shared.viewers.load(Ordering::SeqCst),
    };
    write(wr, &hello).await.ok()?;
    let mut buf = Vec::new();
    // Gone before hello: `harvest status` only reads the engine's hello.
    let Ok(Ok(true)) = tokio::time::timeout(HELLO_TIMEOUT, read_line(reader, &mut buf)).await
    else {
        return None;
    };
    let reason = match wire::decode::<ClientMsg>(&buf) {
        Ok(ClientMsg::Hello { version, role }) if version == VERSION => return Some(role),
        Ok(ClientMsg::Hello { version, .. }) => format!(
            "this engine speaks control version {VERSION} (harvest {}); the client \
             speaks {version}: use the same harvest for both",
            env!("CARGO_PKG_VERSION")
        ),
        Ok(_) => "say hello first".to_string(),
        Err(reason) => reason,
    };
    let _ = write(wr, &EngineMsg::Refused { reason }).await;
    None
}

/// Serves a greeted client: snapshots out (at most every `MIN_GAP`, at least every
/// `HEARTBEAT`), commands in. Returns why the connection ended, or the error that dropped it.
async fn serve_client(
    shared: &Shared,
    pid: u32,
    mut reader: Reader,
    wr: &mut Writer,
) -> Result<&'static str, String> {
    let viewer = Viewer { pid };
    let mut buf = Vec::new();
    let mut snapshots = shared.snapshots.clone();
    let mut last: Arc<Snapshot> = snapshots.borrow_and_update().clone();
    let mut last_at = Instant::now();
    let mut dirty = false;
    let mut engine_gone = false;
    write(
        wr,
        &EngineMsg::Snapshot {
            snapshot: last.clone(),
        },
    )
    .await?;
    loop {
        if is_over(&last) {
            return Ok("the run ended");
        }
        let due = last_at + if dirty { MIN_GAP } else { HEARTBEAT };
        tokio::select! {
            () = shared.cancel.cancelled() => return Ok("the engine exits"),
            r = snapshots.changed(), if !engine_gone && !dirty => {
                if r.is_err() {
                    engine_gone = true;
                }
                let new = snapshots.borrow_and_update().clone();
                dirty = changed(&last, &new) || is_over(&new);
            }
            () = tokio::time::sleep_until(due) => {
                let new = snapshots.borrow_and_update().clone();
                write(wr, &EngineMsg::Snapshot { snapshot: new.clone() }).await?;
                last = new;
                last_at = Instant::now();
                dirty = false;
                if engine_gone && !is_over(&last) {
                    return Ok("the engine exits");
                }
            }
            line = read_line(&mut reader, &mut buf) => {
                if !line? {
                    return Ok("it closed the connection");
                }
                let msg = wire::decode::<ClientMsg>(&buf);
                buf.clear();
                if let Some(reason) = take(shared, viewer, msg) {
                    write(wr, &EngineMsg::Rejected { reason }).await?;
                }
                // A command shows in the next snapshot: send it soon.
                dirty = true;
            }
        }
    }
}

/// Passes a client's command to the engine; why it was not taken, if it was not.
fn take(shared: &Shared, viewer: Viewer, msg: Result<ClientMsg, String>) -> Option<String> {
    match msg {
        Ok(ClientMsg::Command { command }) if command.from_viewer_allowed() => {
            tracing::info!("control socket: pid {} sent {command:?}", viewer.pid);
            match shared
                .commands
                .try_send(Command::By(viewer, Box::new(command)))
            {
                Ok(()) => None,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    Some("the engine is busy: command not taken; try again".to_string())
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    Some("the engine has stopped taking commands".to_string())
                }
            }
        }
        Ok(ClientMsg::Command { command }) => {
            Some(format!("{command:?} cannot be sent from another shell"))
        }
        Ok(ClientMsg::Hello { .. }) => None,
        Err(e) => Some(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fallback socket directory is used only when it is this user's own and private.
    #[test]
    fn the_fallback_directory_must_be_private() {
        let root = tempfile::tempdir().expect("tmp");
        let d = root.path().join("harvest-uid");
        std::fs::create_dir(&d).expect("dir");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        private_dir(&d).expect("private");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = private_dir(&d).expect_err("open to others").to_string();
        assert!(err.contains("is open to other users (mode 777)"), "{err}");
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&d, &link).expect("link");
        let err = private_dir(&link).expect_err("a link").to_string();
        assert!(err.contains("is not a directory"), "{err}");
        // Another user's directory (when the test may hand one over: as root).
        if rustix::process::geteuid().is_root() {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).expect("chmod");
            std::os::unix::fs::chown(&d, Some(65534), None).expect("chown");
            let err = private_dir(&d).expect_err("not mine").to_string();
            assert!(err.contains("is owned by uid 65534"), "{err}");
        }
    }
}
