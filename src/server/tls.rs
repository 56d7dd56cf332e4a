//! TLS for the service: a certificate chain and its private key in PEM files, served
//! through rustls with the `ring` provider (no OpenSSL, no C build beyond ring's).
//!
//! The handshake happens inside each connection's task in [`super::listen`], under the
//! header timeout, so every route (the OpenAI-compatible ones included) is served over
//! TLS alone and a client that stalls its handshake holds nothing for long. Only TLS 1.2
//! and 1.3 with rustls' safe defaults are offered, and ALPN announces `http/1.1` (the one
//! protocol the service speaks).

use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, Context as _, Result};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// What a connection needs to speak TLS.
pub type TlsAcceptor = tokio_rustls::TlsAcceptor;

/// The server configuration from PEM files: `cert` holds the certificate chain (the
/// server's certificate first), `key` its private key (PKCS#8, PKCS#1 or SEC1). Errors
/// name the file at fault.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>> {
    let cert_pem = std::fs::read(cert)
        .with_context(|| format!("cannot read the TLS certificate {}", cert.display()))?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("{e:?}"))
        .with_context(|| format!("TLS certificate {}: not valid PEM", cert.display()))?;
    if chain.is_empty() {
        anyhow::bail!(
            "TLS certificate {}: no `BEGIN CERTIFICATE` block (a PEM certificate chain, the server's certificate first)",
            cert.display()
        );
    }
    let key_pem =
        std::fs::read(key).with_context(|| format!("cannot read the TLS key {}", key.display()))?;
    let private = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| anyhow!("{e:?}"))
        .with_context(|| {
            format!(
                "TLS key {}: no private key in PEM (PKCS#8, PKCS#1 or SEC1)",
                key.display()
            )
        })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("cannot set up TLS")?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .with_context(|| {
            format!(
                "TLS key {} does not fit the certificate {} (or is of a kind rustls does not take)",
                key.display(),
                cert.display()
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// An acceptor over [`server_config`].
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor> {
    Ok(TlsAcceptor::from(server_config(cert, key)?))
}
