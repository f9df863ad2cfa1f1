//! [`Lane`]: one HTTP client of the transport and, over HTTP/2, the gate that lets its first
//! request go alone, so that the lane's streams share one connection.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// One client (hyper's or reqwest's) and, over HTTP/2, the gate that lets its first request
/// go alone.
pub(in crate::openrouter) struct Lane<C> {
    pub(super) client: C,
    /// Over HTTP/2, held by the request that opens the lane's connection. Until TLS has
    /// chosen the protocol (ALPN), the client's pool does not know the connection will be
    /// shared, and a burst of requests each opens its own: 205 TLS handshakes for 300 streams
    /// that then share 5 connections (tests/it/tls.rs). The others wait for the first one's
    /// response headers, or [`OPEN_ALONE`] at most, and then share its connection. `None` over
    /// HTTP/1.1.
    opening: Option<tokio::sync::RwLock<()>>,
    opened: AtomicBool,
}

/// The longest a lane's first request holds the others back. The connection is pooled once
/// its handshake is done, well before this on any working network; a server slow to send
/// headers (or not answering at all) must not hold a lane's streams behind one request, so
/// past this the rest go as they would without the gate.
const OPEN_ALONE: Duration = Duration::from_secs(2);

impl<C> Lane<C> {
    /// A lane for `client`; `gated` when it may speak HTTP/2.
    pub(in crate::openrouter) fn new(client: C, gated: bool) -> Lane<C> {
        Lane {
            client,
            opening: gated.then(|| tokio::sync::RwLock::new(())),
            opened: AtomicBool::new(!gated),
        }
    }

    /// Sends a request on this lane; the lane's first goes alone (see [`Lane::opening`]).
    /// The others wait on the gate's read side, so they all go at once when it opens. If the
    /// first fails or is dropped, one of them opens the lane instead; a failed request closes
    /// the gate again, since its connection may be gone and the next burst would otherwise
    /// open one per stream again.
    pub(super) async fn send<T, E, Fut>(&self, request: impl Fn(&C) -> Fut) -> Result<T, E>
    where
        Fut: Future<Output = Result<T, E>>,
    {
        let Some(gate) = &self.opening else {
            return request(&self.client).await;
        };
        while !self.opened.load(Ordering::Acquire) {
            let Ok(held) = gate.try_write() else {
                // Another request is opening the lane: wait for it, then look again.
                drop(gate.read().await);
                continue;
            };
            if self.opened.load(Ordering::Acquire) {
                break;
            }
            let send = request(&self.client);
            tokio::pin!(send);
            let r = match tokio::time::timeout(OPEN_ALONE, &mut send).await {
                Ok(r) => r,
                Err(_) => {
                    self.opened.store(true, Ordering::Release);
                    drop(held);
                    send.await
                }
            };
            self.opened.store(r.is_ok(), Ordering::Release);
            return r;
        }
        let r = request(&self.client).await;
        if r.is_err() {
            self.opened.store(false, Ordering::Release);
        }
        r
    }
}
