//! TLS with rustls: listeners serve it with `tls_cert` and `tls_key` (PEM files), gRPC sinks
//! use it for `https://` endpoints, trusting `tls_ca` (PEM) or else the system's roots.
//! Relative paths are resolved like other file options (against the first pipeline file).

use std::path::Path;
use std::sync::Arc;

use penstock_dialect::{Sink, Source};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

use super::error::GatewayError;
use super::program::resolve_path;

/// How long a client may take to complete the TLS handshake.
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The bytes of the PEM file `path` names for `owner` (`source NAME` or `sink NAME`).
fn read(owner: &str, base: &Path, path: &str) -> Result<Vec<u8>, GatewayError> {
    let resolved = resolve_path(base, path);
    std::fs::read(&resolved).map_err(|source| GatewayError::ReadTlsFile {
        owner: owner.to_string(),
        path: resolved,
        source,
    })
}

/// The TLS acceptor of a listening source, offering `alpn` protocols; `None` without
/// `tls_cert`.
pub fn acceptor(
    source: &Source,
    base: &Path,
    alpn: &[&[u8]],
) -> Result<Option<TlsAcceptor>, GatewayError> {
    let owner = format!("source {}", source.name);
    let options = &source.options;
    let (cert, key) = match (options.str("tls_cert"), options.str("tls_key")) {
        (None, None) => return Ok(None),
        (Some(cert), Some(key)) => (cert, key),
        _ => return Err(GatewayError::TlsPair { owner }),
    };
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&read(&owner, base, cert)?)
            .collect::<Result<_, _>>()
            .map_err(|source| GatewayError::TlsCertificate {
                owner: owner.clone(),
                path: cert.to_string(),
                source,
            })?;
    if certs.is_empty() {
        return Err(GatewayError::NoCertificate {
            owner,
            path: cert.to_string(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(&read(&owner, base, key)?).map_err(|source| {
        GatewayError::TlsKey {
            owner: owner.clone(),
            path: key.to_string(),
            source,
        }
    })?;
    let refused = |what: &'static str| {
        let owner = owner.clone();
        move |source| GatewayError::TlsConfig {
            owner,
            what,
            source,
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(refused("TLS protocol versions"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(refused("tls_cert and tls_key do not make a usable pair"))?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Some(TlsAcceptor::from(Arc::new(config))))
}

/// The client TLS settings of a gRPC sink with an `https://` endpoint; `None` for `http://`.
pub fn client(
    sink: &Sink,
    base: &Path,
) -> Result<Option<tonic::transport::ClientTlsConfig>, GatewayError> {
    let endpoint = sink.options.str("endpoint").unwrap_or_default();
    if !endpoint.starts_with("https://") {
        if sink.options.str("tls_ca").is_some() {
            return Err(GatewayError::TlsCaWithoutHttps {
                sink_name: sink.name.clone(),
            });
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
