//! TLS with rustls: listeners serve it with `tls_cert` and `tls_key` (PEM files), gRPC sinks
//! use it for `https://` endpoints, trusting `tls_ca` (PEM) or else the system's roots.
//! Relative paths are resolved like other file options (against the first pipeline file).

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use penstock_dialect::{Sink, Source};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

/// How long a client may take to complete the TLS handshake.
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

fn read(what: &str, base: &Path, path: &str) -> anyhow::Result<Vec<u8>> {
    let resolved = crate::cli::resolve_path(base, path);
    std::fs::read(&resolved).with_context(|| format!("{what}: reading {}", resolved.display()))
}

/// The TLS acceptor of a listening source, offering `alpn` protocols; `None` without
/// `tls_cert`.
pub fn acceptor(
    source: &Source,
    base: &Path,
    alpn: &[&[u8]],
) -> anyhow::Result<Option<TlsAcceptor>> {
    let what = format!("source {}", source.name);
    let options = &source.options;
    let (cert, key) = match (options.str("tls_cert"), options.str("tls_key")) {
        (None, None) => return Ok(None),
        (Some(cert), Some(key)) => (cert, key),
        _ => anyhow::bail!("{what}: tls_cert and tls_key must be given together"),
    };
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&read(&what, base, cert)?)
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!("{what}: tls_cert '{cert}': {e}"))?;
    if certs.is_empty() {
        anyhow::bail!("{what}: tls_cert '{cert}' holds no certificate");
    }
    let key = PrivateKeyDer::from_pem_slice(&read(&what, base, key)?)
        .map_err(|e| anyhow::anyhow!("{what}: tls_key '{key}': {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .with_context(|| format!("{what}: tls_cert and tls_key do not make a usable pair"))?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Some(TlsAcceptor::from(Arc::new(config))))
}

/// The client TLS settings of a gRPC sink with an `https://` endpoint; `None` for `http://`.
pub fn client(
    sink: &Sink,
    base: &Path,
) -> anyhow::Result<Option<tonic::transport::ClientTlsConfig>> {
    let endpoint = sink.options.str("endpoint").unwrap_or_default();
    if !endpoint.starts_with("https://") {
        if sink.options.str("tls_ca").is_some() {
            anyhow::bail!("sink {}: tls_ca needs an https:// endpoint", sink.name);
        }
        return Ok(None);
    }
    let config = tonic::transport::ClientTlsConfig::new();
    Ok(Some(match sink.options.str("tls_ca") {
        Some(ca) => {
            let pem = read(&format!("sink {}", sink.name), base, ca)?;
            config.ca_certificate(tonic::transport::Certificate::from_pem(pem))
        }
        None => config.with_native_roots(),
    }))
}
