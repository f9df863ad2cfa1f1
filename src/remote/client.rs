//! The client side of the control socket (`harvest attach`, `stop`, `status`): connects to the
//! engine of an output directory, exchanges hellos, and then pumps snapshots into a `watch`
//! and commands out of an `mpsc`, the same two channels a foreground TUI has.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch};

use crate::engine::Command;
use crate::engine::snapshot::Snapshot;

use super::wire::{self, ClientMsg, EngineMsg, Role, VERSION, read_line};

const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// No engine listens: none runs there, or it ended (or crashed).
    #[error("no harvest run is live in {dir} (nothing listens on {socket})")]
    NotLive { dir: PathBuf, socket: PathBuf },
    /// Something listens, or may, but this user may not connect (another user's run).
    #[error(
        "cannot reach the run in {dir}: {socket}: {detail} (a run of another user? harvest \
         stop and attach work for the user who started it)"
    )]
    Unreachable {
        dir: PathBuf,
        socket: PathBuf,
        detail: String,
    },
    #[error("the run in {dir} refused the connection: {reason}")]
    Refused { dir: PathBuf, reason: String },
    #[error("the run in {dir} did not answer: {detail}")]
    Protocol { dir: PathBuf, detail: String },
}

/// The engine's hello.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct EngineInfo {
    pub pid: u32,
    pub harvest: String,
    pub viewers: u32,
    pub output_dir: String,
}

/// A connection after the hellos.
pub(crate) struct Connection {
    pub engine: EngineInfo,
    stream: UnixStream,
}

/// Why connecting to `socket` failed: nothing listens (no file, or no process behind it), or
/// this user may not connect (reliability-probe-4 N12: not "no run is live" then).
fn not_connected(e: &std::io::Error, dir: &Path, socket: &Path) -> ConnectError {
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        ConnectError::Unreachable {
            dir: dir.to_path_buf(),
            socket: socket.to_path_buf(),
            detail: e.to_string(),
        }
    } else {
        ConnectError::NotLive {
            dir: dir.to_path_buf(),
            socket: socket.to_path_buf(),
        }
    }
}

/// Connects to the engine of `dir` and reads its hello.
pub(crate) async fn connect(dir: &Path) -> Result<Connection, ConnectError> {
    let socket = super::socket_path(dir);
    let stream =
        (UnixStream::connect(&socket).await).map_err(|e| not_connected(&e, dir, &socket))?;
    let protocol = |detail: String| ConnectError::Protocol {
        dir: dir.to_path_buf(),
        detail,
    };
    // Both ways: a process of another user listening there (a socket planted in a shared
    // directory) gets neither our commands nor our trust in its snapshots.
    let own = super::own_uid();
    match stream.peer_cred().map(|c| c.uid()) {
        Ok(uid) if super::peer_allowed(uid, own) => {}
        Ok(uid) => {
            return Err(ConnectError::Refused {
                dir: dir.to_path_buf(),
                reason: format!(
                    "{} is served by uid {uid}, not by you (uid {own}): not a run of yours",
                    socket.display()
                ),
            });
        }
        Err(e) => return Err(protocol(format!("cannot tell who serves it: {e}"))),
    }
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    match tokio::time::timeout(HELLO_TIMEOUT, read_line(&mut reader, &mut buf)).await {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) => return Err(protocol("it closed the connection".into())),
        Ok(Err(e)) => return Err(protocol(e)),
        Err(_) => return Err(protocol("no hello within 10 s".into())),
    }
    let engine = match wire::decode::<EngineMsg>(&buf).map_err(protocol)? {
        EngineMsg::Hello {
            version,
            harvest,
            pid,
            output_dir,
            viewers,
        } => {
            if version != VERSION {
                return Err(ConnectError::Refused {
                    dir: dir.to_path_buf(),
                    reason: format!(
                        "it speaks control version {version} (harvest {harvest}), this harvest \
                         speaks {VERSION}: use the same harvest for both"
                    ),
                });
            }
            EngineInfo {
                pid,
                harvest,
                viewers,
                output_dir,
            }
        }
        EngineMsg::Refused { reason } => {
            return Err(ConnectError::Refused {
                dir: dir.to_path_buf(),
                reason,
            });
        }
        other => return Err(protocol(format!("expected a hello, got {other:?}"))),
    };
    // Nothing else was sent before our hello: the buffer holds no more than the line read.
    Ok(Connection {
        engine,
        stream: reader.into_inner(),
    })
}

/// A viewer's live link: snapshots in, commands out, and the engine's rejections.
pub(crate) struct Link {
    pub snapshots: watch::Receiver<Arc<Snapshot>>,
    pub commands: mpsc::Sender<Command>,
    /// Why a command was not taken (shown to the operator).
    pub notices: mpsc::Receiver<String>,
    /// Ends when the connection does; says why.
    pub done: tokio::task::JoinHandle<String>,
}

impl Connection {
    /// Says hello as `role`, waits for the first snapshot, and starts pumping.
    pub(crate) async fn start(self, role: Role) -> Result<Link, ConnectError> {
        let dir = PathBuf::from(&self.engine.output_dir);
        let protocol = |detail: String| ConnectError::Protocol {
            dir: dir.clone(),
            detail,
        };
        let (rd, mut wr) = self.stream.into_split();
        wr.write_all(&wire::encode(&ClientMsg::Hello {
            version: VERSION,
            role,
        }))
        .await
        .map_err(|e| protocol(format!("writing failed: {e}")))?;
        let mut reader = BufReader::new(rd);
        let mut buf = Vec::new();
        let first =
            match tokio::time::timeout(HELLO_TIMEOUT, read_line(&mut reader, &mut buf)).await {
                Ok(Ok(true)) => match wire::decode::<EngineMsg>(&buf).map_err(protocol)? {
                    EngineMsg::Snapshot { snapshot } => snapshot,
                    EngineMsg::Refused { reason } => {
                        return Err(ConnectError::Refused { dir, reason });
                    }
                    other => return Err(protocol(format!("expected a snapshot, got {other:?}"))),
                },
                Ok(Ok(false)) => return Err(protocol("it closed the connection".into())),
                Ok(Err(e)) => return Err(protocol(e)),
                Err(_) => return Err(protocol("no snapshot within 10 s".into())),
            };
        buf.clear();
        let (snap_tx, snap_rx) = watch::channel(first);
        let (cmd_tx, mut cmd_rx) = mpsc::channel::<Command>(64);
        let (note_tx, note_rx) = mpsc::channel::<String>(16);
        let done = tokio::spawn(async move {
            loop {
                tokio::select! {
                    line = read_line(&mut reader, &mut buf) => {
                        match line {
                            Ok(true) => {}
                            Ok(false) => return "the engine closed the connection".to_string(),
                            Err(e) => return e,
                        }
                        let msg = wire::decode::<EngineMsg>(&buf);
                        buf.clear();
                        match msg {
                            Ok(EngineMsg::Snapshot { snapshot }) => {
                                snap_tx.send_replace(snapshot);
                            }
                            Ok(EngineMsg::Rejected { reason }) => {
                                let _ = note_tx.try_send(reason);
                            }
                            Ok(EngineMsg::Refused { reason }) => return reason,
                            Ok(EngineMsg::Hello { .. }) => {}
                            Err(e) => return e,
                        }
                    }
                    cmd = cmd_rx.recv() => match cmd {
                        Some(command) => {
                            let line = wire::encode(&ClientMsg::Command { command });
                            if let Err(e) = wr.write_all(&line).await {
                                return format!("writing failed: {e}");
                            }
                        }
                        None => {
                            // The viewer left: closing our half tells the engine.
                            let _ = wr.shutdown().await;
                            return "detached".to_string();
                        }
                    },
                }
            }
        });
        Ok(Link {
            snapshots: snap_rx,
            commands: cmd_tx,
            notices: note_rx,
            done,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Error, ErrorKind};

    #[test]
    fn a_socket_this_user_may_not_reach_is_not_said_to_be_dead() {
        let (dir, sock) = (Path::new("out"), Path::new("out/harvest.sock"));
        let said = |k: ErrorKind| not_connected(&Error::from(k), dir, sock).to_string();
        assert!(said(ErrorKind::NotFound).starts_with("no harvest run is live in out"));
        assert!(said(ErrorKind::ConnectionRefused).starts_with("no harvest run is live"));
        let denied = said(ErrorKind::PermissionDenied);
        assert!(
            denied.starts_with("cannot reach the run in out: out/harvest.sock: permission denied")
                && denied.contains("another user"),
            "{denied}"
        );
    }
}
