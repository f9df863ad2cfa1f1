//! [`ReadAhead`]: a connection read from the kernel in large pieces, for rustls above it.
//!
//! rustls asks its transport for at most 4 KiB a read (`DeframerVecBuffer::prepare_read` in
//! rustls 0.23). At real provider pace a batched wake-up finds tens of kilobytes waiting on each
//! HTTP/2 connection (64 streams, a token or two each, a TLS record and an HTTP/2 frame a token),
//! so every wake-up cost one `recv` call per 4 KiB and a last one to hear `EAGAIN`. Below
//! rustls, this reads up to [`READ_SIZE`] at once and hands rustls its 4 KiB from memory.
//! A reader that asks for as much or more reads straight from the connection; a connection
//! with no TLS above it (plain HTTP/1.1, where hyper's own read buffer is capped), or one that
//! can only speak HTTP/1.1 (`http2 = false`: one stream a connection, a token or two a
//! wake-up), is never read ahead ([`ReadAhead::direct`]), and no buffer is ever made for
//! either.

use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::rt::{Read, ReadBuf, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};

/// How much one `recv` may bring: two batched wake-ups' worth of a busy HTTP/2 connection at
/// real pace, a fraction of what the connection's HTTP/2 window lets the server send.
pub(crate) const READ_SIZE: usize = 32 * 1024;

/// A connection whose small reads are served from one large read (public as the connection
/// type of the public [`super::direct::Connector`]).
pub struct ReadAhead<T> {
    io: T,
    /// Small reads are served from `buf`; when not, every read goes to `io`.
    ahead: bool,
    /// Made at the first small read.
    buf: Vec<u8>,
    /// The bytes read and not yet handed over: `buf[start..end]`.
    start: usize,
    end: usize,
}

impl<T> ReadAhead<T> {
    /// `io` read ahead (a TLS connection's).
    pub fn new(io: T) -> ReadAhead<T> {
        ReadAhead {
            io,
            ahead: true,
            buf: Vec::new(),
            start: 0,
            end: 0,
        }
    }

    /// `io` read as it is asked (a plain connection's).
    pub fn direct(io: T) -> ReadAhead<T> {
        ReadAhead {
            ahead: false,
            ..ReadAhead::new(io)
        }
    }
}

impl<T: Read + Unpin> Read for ReadAhead<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut out: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.start == this.end {
            if !this.ahead || out.remaining() >= READ_SIZE {
                return Pin::new(&mut this.io).poll_read(cx, out);
            }
            if this.buf.is_empty() {
                this.buf = vec![0; READ_SIZE];
            }
            let mut rb = ReadBuf::new(&mut this.buf);
            match Pin::new(&mut this.io).poll_read(cx, rb.unfilled()) {
                Poll::Ready(Ok(())) => {}
                other => return other,
            }
            let n = rb.filled().len();
            // Nothing read is the end of the stream: the reader sees it as such.
            (this.start, this.end) = (0, n);
        }
        let n = out.remaining().min(this.end - this.start);
        out.put_slice(&this.buf[this.start..this.start + n]);
        this.start += n;
        Poll::Ready(Ok(()))
    }
}

impl<T: Write + Unpin> Write for ReadAhead<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
}

impl<T: Connection> Connection for ReadAhead<T> {
    fn connected(&self) -> Connected {
        self.io.connected()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper_util::rt::TokioIo;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// What a reader asking for `ask` bytes at a time reads through a `ReadAhead` over a
    /// socket the other end writes `sent` to, then closes.
    async fn read_through(sent: Vec<u8>, ask: usize, ahead: bool) -> (Vec<u8>, usize) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let writer = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            s.write_all(&sent).await.expect("write");
            s.shutdown().await.expect("shutdown");
        });
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        writer.await.expect("writer");
        // Everything is in the socket before the first read: the large reads are exercised.
        let io = TokioIo::new(tcp);
        let mut r = TokioIo::new(if ahead {
            ReadAhead::new(io)
        } else {
            ReadAhead::direct(io)
        });
        let (mut got, mut largest_held) = (Vec::new(), 0);
        let mut piece = vec![0u8; ask];
        loop {
            let n = r.read(&mut piece).await.expect("read");
            if n == 0 {
                break;
            }
            assert!(n <= ask);
            got.extend_from_slice(&piece[..n]);
            let inner = r.inner();
            largest_held = largest_held.max(inner.end - inner.start);
        }
        (got, largest_held)
    }

    #[tokio::test]
    async fn small_reads_come_from_one_large_read_and_every_byte_arrives_once() {
        let sent: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let (got, held) = read_through(sent.clone(), 4096, true).await;
        assert_eq!(got, sent);
        assert!(held > 4096, "bytes were read ahead: {held}");
        assert!(held <= READ_SIZE);
    }

    #[tokio::test]
    async fn a_plain_connection_is_never_read_ahead() {
        let sent: Vec<u8> = (0..100_000u32).map(|i| (i % 7) as u8).collect();
        let (got, held) = read_through(sent.clone(), 4096, false).await;
        assert_eq!(got, sent);
        assert_eq!(held, 0, "nothing held for it");
    }

    #[tokio::test]
    async fn a_reader_asking_for_as_much_reads_the_connection_directly() {
        let sent: Vec<u8> = (0..100_000u32).map(|i| (i % 13) as u8).collect();
        let (got, held) = read_through(sent.clone(), READ_SIZE, true).await;
        assert_eq!(got, sent);
        assert_eq!(held, 0, "nothing held for it");
    }
}
