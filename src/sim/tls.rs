//! HTTPS for the simulator (`harvest sim --tls`), as the real API speaks it (OpenRouter's base
//! URL is `https://`; issue #16 reports it speaking HTTP/2, which this project has not checked
//! against the live API). At start it makes a certificate authority and a certificate
//! for 127.0.0.1 and localhost signed by it (rcgen); the authority's PEM is what a client
//! trusts (`SSL_CERT_FILE`, a config's `ca_cert`, the peer's `--ca-cert`). rustls terminates
//! TLS and offers HTTP/2 and HTTP/1.1 by ALPN; hyper-util's auto server speaks whichever was
//! chosen, over the same axum router as plain HTTP.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// HTTP/2 streams one connection may carry at once, unless the config says otherwise: servers
/// commonly advertise 100 to 256, which is why harvest's default is one HTTP/1.1 connection
/// per stream.
pub(crate) const DEFAULT_H2_MAX_STREAMS: u32 = 256;

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The simulator's TLS identity.
#[derive(Clone)]
pub(crate) struct Tls {
    acceptor: TlsAcceptor,
    /// The authority that signed the server's certificate, PEM: what clients trust.
    pub ca_pem: String,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

/// A fresh authority and server certificate (a new pair at every start: nothing to keep
/// secret between runs).
pub(crate) fn generate() -> Result<Tls, String> {
    let err = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
    let ca_key = KeyPair::generate().map_err(|e| err("generating the CA key", &e))?;
    let mut ca =
        CertificateParams::new(Vec::<String>::new()).map_err(|e| err("CA parameters", &e))?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "harvest simulator CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca
        .self_signed(&ca_key)
        .map_err(|e| err("signing the CA", &e))?;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().map_err(|e| err("generating the server key", &e))?;
    let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .map_err(|e| err("server certificate parameters", &e))?;
    leaf.distinguished_name
        .push(DnType::CommonName, "harvest simulator");
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = leaf
        .signed_by(&key, &issuer)
        .map_err(|e| err("signing the server certificate", &e))?;
    let chain = vec![cert.der().clone(), ca_cert.der().clone()];
    let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| err("TLS versions", &e))?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| err("the server certificate", &e))?;
    // As a CDN in front of an API offers them: HTTP/2 first, HTTP/1.1 for clients that ask.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Tls {
        acceptor: TlsAcceptor::from(Arc::new(config)),
        ca_pem: ca_cert.pem(),
    })
}

/// Serves `app` over TLS on `listener` until `stop`; each connection then finishes its
/// responses (the simulator's own stop ends paced ones) and closes.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Tls,
    h2_max_streams: u32,
    state: Arc<super::state::SimState>,
    stop: CancellationToken,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http2()
        .max_concurrent_streams(h2_max_streams)
        // Streams end when the simulator says; no keep-alive pings needed on loopback.
        .timer(hyper_util::rt::TokioTimer::new());
    loop {
        let tcp = tokio::select! {
            () = stop.cancelled() => break,
            r = listener.accept() => match r {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    tracing::warn!("simulator: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, app, builder, stop, state) = (
            tls.acceptor.clone(),
            app.clone(),
            builder.clone(),
            stop.clone(),
            state.clone(),
        );
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!("simulator: TLS handshake failed: {e}");
                    return;
                }
                Err(_) => return,
            };
            state.count_connection();
            let conn =
                builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!("simulator: connection ended: {e}");
                    }
                }
                () = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
}
