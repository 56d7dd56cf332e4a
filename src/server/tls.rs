//! TLS for the service: a certificate chain and its private key in PEM files, served
//! through rustls with the `ring` provider (no OpenSSL, no C build beyond ring's).
//!
//! The handshake happens inside each connection's task in [`super::listen`], under the
//! header timeout, so every route (the OpenAI-compatible ones included) is served over
//! TLS alone and a client that stalls its handshake holds nothing for long. Only TLS 1.2
//! and 1.3 with rustls' safe defaults are offered, and ALPN announces `http/1.1` (the one
//! protocol the service speaks).
//!
//! The certificate and key are read again on demand ([`Certificate::reload`]; `serve`
//! does it on SIGHUP, with the token file): a renewed certificate is presented from the
//! next handshake on, connections already open keep theirs, and files that do not load
//! (unreadable, not PEM, a key that does not fit) leave the certificate in use as it was.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use anyhow::{anyhow, Context as _, Result};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// What a connection needs to speak TLS.
pub type TlsAcceptor = tokio_rustls::TlsAcceptor;

/// The certificate chain and key the service presents, reloadable.
#[derive(Debug)]
pub struct Certificate {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

impl Certificate {
    /// Read the files again and present them from the next handshake on; on an error the
    /// certificate in use stays.
    pub fn reload(&self) -> Result<()> {
        let fresh = certified_key(&self.cert, &self.key)
            .context("the TLS certificate did not reload; the previous one stays")?;
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = fresh;
        Ok(())
    }

    /// The certificate file's path.
    pub fn cert_path(&self) -> &Path {
        &self.cert
    }

    /// The chain presented now (for tests and logs).
    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .cert
            .clone()
    }
}

impl ResolvesServerCert for Certificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .clone(),
        )
    }
}

/// The server configuration from PEM files: `cert` holds the certificate chain (the
/// server's certificate first), `key` its private key (PKCS#8, PKCS#1 or SEC1). Errors
/// name the file at fault.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>> {
    Ok(reloadable(cert, key)?.0)
}

/// [`server_config`], and the [`Certificate`] it presents, to reload.
pub fn reloadable(
    cert: &Path,
    key: &Path,
) -> Result<(Arc<rustls::ServerConfig>, Arc<Certificate>)> {
    let certificate = Arc::new(Certificate {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        current: RwLock::new(certified_key(cert, key)?),
    });
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("cannot set up TLS")?
        .with_no_client_auth()
        .with_cert_resolver(certificate.clone());
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((Arc::new(config), certificate))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The chain and key of the PEM files, checked to fit each other.
fn certified_key(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>> {
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
    let certified = CertifiedKey::from_der(chain, private, &provider())
        .map_err(|e| anyhow!("{e}"))
        .with_context(|| {
            format!(
                "TLS key {} does not fit the certificate {} (or is of a kind rustls does not take)",
                key.display(),
                cert.display()
            )
        })?;
    Ok(Arc::new(certified))
}

/// An acceptor over [`server_config`].
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor> {
    Ok(TlsAcceptor::from(server_config(cert, key)?))
}
