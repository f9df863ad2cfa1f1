//! The control socket: a running engine (foreground, headless or detached) listens on a Unix
//! domain socket of its output directory so that other shells can watch and steer it
//! (`harvest attach`, `harvest stop`, `harvest status`).
//!
//! - [`wire`]: the messages, newline-delimited JSON, versioned.
//! - [`server`]: the engine side: one task per connection, the latest snapshot only, a slow
//!   viewer dropped instead of slowing the run.
//! - [`client`]: the other side: connect, hello, snapshots into a `watch`, commands out.
//!
//! Who may connect: the socket file is created with mode 0600 (only its owner can open it),
//! and the server also checks each connection's peer uid (from the kernel, `SO_PEERCRED`)
//! against its own, so another local user is refused even where file modes are not enforced.

pub(crate) mod client;
pub mod server;
pub mod wire;

use std::path::{Path, PathBuf};

/// The socket's file name in the output directory.
pub const SOCKET_NAME: &str = "harvest.sock";

/// The longest socket path the platform takes (`sun_path` is 108 bytes on Linux, 104 on the
/// BSDs and macOS, both with the terminating NUL).
const MAX_SOCKET_PATH: usize = 103;

/// Where the engine of `dir` listens: `<dir>/harvest.sock`, or, when that path is too long
/// for a Unix socket, a file named after a hash of the directory in the user's runtime
/// directory (`$XDG_RUNTIME_DIR`, else a private `harvest-<uid>` directory under the system's
/// temporary directory). Both sides compute it the same way from the canonical directory.
pub fn socket_path(dir: &Path) -> PathBuf {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let local = dir.join(SOCKET_NAME);
    if local.as_os_str().len() <= MAX_SOCKET_PATH {
        return local;
    }
    runtime_dir().join(format!("harvest-{:016x}.sock", fnv1a(&dir)))
}

fn runtime_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => std::env::temp_dir().join(format!("harvest-{}", own_uid())),
    }
}

/// A hash that does not change between builds (std's `DefaultHasher` may), so that an
/// attach from a newer harvest finds an older engine's socket: FNV-1a, as prompt ids use.
fn fnv1a(dir: &Path) -> u64 {
    use crate::store::prompts::{FNV_OFFSET, fnv1a};
    fnv1a(dir.as_os_str().as_encoded_bytes(), FNV_OFFSET)
}

/// This process's real uid.
pub fn own_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// Whether a connection whose peer has `peer_uid` may watch and steer the run: only its own
/// user (root included only when the engine runs as root).
pub fn peer_allowed(peer_uid: u32, own_uid: u32) -> bool {
    peer_uid == own_uid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_engines_own_user_may_connect() {
        let cases = [
            (1000, 1000, true),
            (1001, 1000, false),
            (0, 1000, false),
            (1000, 0, false),
            (0, 0, true),
        ];
        for (peer, own, ok) in cases {
            assert_eq!(peer_allowed(peer, own), ok, "peer {peer}, own {own}");
        }
    }

    #[test]
    fn the_socket_is_in_the_directory_unless_the_path_is_too_long() {
        let d = tempfile::tempdir().expect("tmp");
        let p = socket_path(d.path());
        assert_eq!(p, d.path().canonicalize().expect("canon").join(SOCKET_NAME));
        let long = d.path().join("a".repeat(120));
        std::fs::create_dir_all(&long).expect("mkdir");
        let p = socket_path(&long);
        assert!(
            p.as_os_str().len() <= MAX_SOCKET_PATH + 40,
            "{}",
            p.display()
        );
        assert!(!p.starts_with(&long), "{}", p.display());
        // The same directory, named another way, gives the same socket.
        assert_eq!(socket_path(&long.join(".")), p);
    }
}
