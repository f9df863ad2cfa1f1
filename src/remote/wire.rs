//! The control socket's wire format, version [`VERSION`]: newline-delimited JSON, one message
//! per line, each an object with a `"type"` field.
//!
//! The engine speaks first: `{"type":"hello","version":1,...}`. The client answers with its own
//! hello and its role; a viewer then gets a `snapshot` at once and another whenever the run
//! changes (at most 5 a second, and one a second at least while the run lives), and may send
//! `command`s at any time. The engine closes the connection after the last snapshot of a run
//! that has ended. A client of another version gets a `refused` line naming both versions.
//!
//! Compatibility: fields are only ever added, with defaults, within a version (a reader
//! ignores the fields it does not know); a change that an older reader would misread bumps
//! [`VERSION`].
//!
//! JSON was chosen over a binary codec with a measurement (`cargo bench --bench wire`, a busy
//! run's snapshot with 100 endpoints, 50 events and 360 history points): JSON encodes it in
//! ~210 us to 73 KB, MessagePack (rmp-serde) in ~110 us to 65 KB. Twice the encode time is
//! 0.1% of a core per viewer at five snapshots a second, and a line of JSON can be read with
//! `socat` and `jq` and written by any language.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncBufReadExt;

use crate::engine::Command;
use crate::engine::Snapshot;

/// The wire format's version: bumped by a change an older reader would misread.
pub const VERSION: u32 = 1;

/// The longest line either side accepts (a snapshot of hundreds of endpoints is ~100 KB).
pub const MAX_LINE: usize = 16 << 20;

/// What the engine sends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EngineMsg {
    /// The first line on every connection.
    Hello {
        version: u32,
        /// The engine's harvest version (informative).
        harvest: String,
        pid: u32,
        output_dir: String,
        /// Viewers attached now (not counting this connection).
        viewers: u32,
    },
    /// The run as it is now; the engine sends only the latest (a slow viewer skips some).
    Snapshot { snapshot: Arc<Snapshot> },
    /// The connection is not served: another version, another user, a bad hello.
    Refused { reason: String },
    /// A command was not taken (not allowed from a viewer, or the engine stopped taking
    /// commands); the viewer shows why.
    Rejected { reason: String },
}

/// Who connects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A TUI (`harvest attach`): counted in `viewers`, gets snapshots, sends commands.
    Viewer,
    /// A one-off client (`harvest stop`, `harvest status`): gets snapshots and may send
    /// commands, but is not counted as a viewer.
    Control,
}

/// What a client sends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMsg {
    Hello {
        version: u32,
        role: Role,
    },
    /// A command to the run, as the TUI of a foreground run sends it.
    Command {
        command: Command,
    },
}

/// One message as a line (with its `\n`).
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    // Serializing these types cannot fail: no maps with non-string keys, no custom errors.
    let mut line = serde_json::to_vec(msg).unwrap_or_else(|e| {
        tracing::error!("encoding a control message failed: {e}");
        b"{}".to_vec()
    });
    line.push(b'\n');
    line
}

/// One line (without its `\n`) as a message.
pub fn decode<'a, T: Deserialize<'a>>(line: &'a [u8]) -> Result<T, String> {
    serde_json::from_slice(line).map_err(|e| {
        let shown = String::from_utf8_lossy(&line[..line.len().min(120)]).into_owned();
        format!("not a harvest control message ({e}): {shown}")
    })
}

/// Reads one line into `buf` (cancel-safe: a partial line stays in `buf` for the next call).
/// `Ok(false)` at the end of the stream. A line past [`MAX_LINE`] is an error as soon as it
/// passes it: the line is read in the reader's chunks, never held whole (a 3 GiB line made the
/// engine hold 3 GiB: reliability-probe-3 D9).
pub async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
) -> Result<bool, String> {
    loop {
        let chunk = r
            .fill_buf()
            .await
            .map_err(|e| format!("reading failed: {e}"))?;
        if chunk.is_empty() {
            return Ok(false);
        }
        let (take, ends) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if buf.len() + take > MAX_LINE + 1 {
            return Err(format!("a line longer than {MAX_LINE} bytes"));
        }
        buf.extend_from_slice(&chunk[..take]);
        r.consume(take);
        if ends {
            buf.pop();
            return Ok(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ShutdownMode;

    /// Lines come one at a time, split anywhere; a line past the cap is refused before it is
    /// held whole.
    #[tokio::test]
    async fn lines_are_read_in_chunks_and_capped() {
        let data = b"{\"a\":1}\n{\"b\":2}\npartial";
        let mut r = tokio::io::BufReader::with_capacity(3, &data[..]);
        let mut buf = Vec::new();
        assert_eq!(read_line(&mut r, &mut buf).await, Ok(true));
        assert_eq!(buf, b"{\"a\":1}");
        buf.clear();
        assert_eq!(read_line(&mut r, &mut buf).await, Ok(true));
        assert_eq!(buf, b"{\"b\":2}");
        buf.clear();
        assert_eq!(
            read_line(&mut r, &mut buf).await,
            Ok(false),
            "no newline: no line"
        );

        let huge = vec![b'A'; MAX_LINE + (1 << 20)];
        let mut r = tokio::io::BufReader::with_capacity(1 << 16, &huge[..]);
        let mut buf = Vec::new();
        let err = read_line(&mut r, &mut buf).await.expect_err("too long");
        assert!(err.contains("a line longer than"), "{err}");
        assert!(buf.len() <= MAX_LINE, "held {} bytes", buf.len());
    }

    /// The documented examples are what the types read and write: the README and other
    /// clients rely on these exact lines.
    #[test]
    fn messages_read_and_write_as_documented() {
        let cases: Vec<(ClientMsg, &str)> = vec![
            (
                ClientMsg::Hello {
                    version: 1,
                    role: Role::Viewer,
                },
                r#"{"type":"hello","version":1,"role":"viewer"}"#,
            ),
            (
                ClientMsg::Command {
                    command: Command::Shutdown(ShutdownMode::Drain),
                },
                r#"{"type":"command","command":{"shutdown":"drain"}}"#,
            ),
            (
                ClientMsg::Command {
                    command: Command::SetEndpoint {
                        tag: "fireworks".into(),
                        allowed: Some(false),
                    },
                },
                r#"{"type":"command","command":{"set_endpoint":{"tag":"fireworks","allowed":false}}}"#,
            ),
            (
                ClientMsg::Command {
                    command: Command::Pause,
                },
                r#"{"type":"command","command":"pause"}"#,
            ),
        ];
        for (msg, line) in cases {
            let bytes = encode(&msg);
            assert_eq!(bytes.last(), Some(&b'\n'));
            assert_eq!(std::str::from_utf8(&bytes[..bytes.len() - 1]), Ok(line));
            assert_eq!(decode::<ClientMsg>(line.as_bytes()), Ok(msg));
        }
        let hello = EngineMsg::Hello {
            version: VERSION,
            harvest: "0.1.0".into(),
            pid: 7,
            output_dir: "out".into(),
            viewers: 2,
        };
        let back: EngineMsg = decode(&encode(&hello)[..]).expect("decodes");
        assert_eq!(back, hello);
    }

    #[test]
    fn a_bad_line_is_an_error_naming_what_was_read() {
        let e = decode::<ClientMsg>(b"GET / HTTP/1.1").expect_err("not json");
        assert!(e.contains("not a harvest control message"), "{e}");
        assert!(e.contains("GET / HTTP/1.1"), "{e}");
        let e = decode::<ClientMsg>(br#"{"type":"command","command":"explode"}"#)
            .expect_err("unknown command");
        assert!(e.contains("explode"), "{e}");
    }
}
