//! Raw HTTP/1.1 servers on 127.0.0.1 for tests that need a server to misbehave in one exact way.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads one HTTP request (head and content-length body). `false` when the peer closed.
pub async fn read_request(sock: &mut TcpStream) -> bool {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                match sock.read(&mut chunk).await {
                    Ok(0) | Err(_) => return false,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            return true;
        }
    }
}

/// Answers every request with the given raw response (status line, headers, body), then
/// closes the connection. Returns the base URL (`http://127.0.0.1:PORT/v1`).
pub async fn canned_server(response: impl Into<String>) -> String {
    let response: std::sync::Arc<str> = response.into().into();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let response = response.clone();
            tokio::spawn(async move {
                if read_request(&mut sock).await {
                    let _ = sock.write_all(response.as_bytes()).await;
                    let _ = sock.shutdown().await;
                }
            });
        }
    });
    format!("http://{addr}/v1")
}
