//! Extra certificate authorities to trust besides the system's: a corporate proxy's that
//! re-signs HTTPS, or the simulator's (`harvest sim --tls`). Read from `SSL_CERT_FILE` (as
//! curl, Python and most TLS tools do) and from a config's `ca_cert`; each file is a PEM bundle
//! of one or more certificates.

use std::path::{Path, PathBuf};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// The environment variable naming a PEM bundle to trust.
pub(crate) const SSL_CERT_FILE: &str = "SSL_CERT_FILE";

/// `SSL_CERT_FILE`, when set to something.
pub(crate) fn from_env() -> Option<PathBuf> {
    std::env::var_os(SSL_CERT_FILE)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The certificates of a PEM bundle; an error names the file and what is wrong with it.
pub(crate) fn read(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = std::fs::read(path).map_err(|e| {
        format!(
            "cannot read the CA certificate file {}: {e}",
            path.display()
        )
    })?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{} is not a PEM certificate bundle: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{} holds no certificate (expected -----BEGIN CERTIFICATE----- blocks)",
            path.display()
        ));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_is_read_and_bad_files_are_named() {
        let d = tempfile::tempdir().expect("tmp");
        let tls = crate::sim::tls::generate().expect("a CA");
        let good = d.path().join("ca.pem");
        // Two certificates in one bundle, as corporate bundles come.
        std::fs::write(&good, format!("{}{}", tls.ca_pem, tls.ca_pem)).expect("write");
        assert_eq!(read(&good).map(|c| c.len()), Ok(2));
        let empty = d.path().join("empty.pem");
        std::fs::write(&empty, "just text\n").expect("write");
        let e = read(&empty).map(|c| c.len()).expect_err("no certificate");
        assert!(
            e.contains("empty.pem") && e.contains("no certificate"),
            "{e}"
        );
        let missing = d.path().join("missing.pem");
        let e = read(&missing).map(|c| c.len()).expect_err("missing");
        assert!(
            e.contains("missing.pem") && e.contains("cannot read"),
            "{e}"
        );
    }
}
