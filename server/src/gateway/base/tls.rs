//! TLS with rustls: listeners serve it with `tls_cert` and `tls_key` (PEM files), network
//! sinks use it for `https://` endpoints, trusting `tls_ca` (PEM) or else the system's roots.
//! Relative paths are resolved like other file options (against the first pipeline file).

use std::path::Path;
use std::sync::Arc;

use penstock_dialect::{Sink, Source};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

use crate::gateway::base::error::GatewayError;
use crate::gateway::base::program::resolve_path;

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

/// Turns rustls refusing what `owner` (`source NAME` or `sink NAME`) set up (`what`) into
/// a gateway error.
fn refused(owner: &str, what: &'static str) -> impl FnOnce(rustls::Error) -> GatewayError {
    let owner = owner.to_string();
    move |source| GatewayError::TlsConfig {
        owner,
        what,
        source,
    }
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
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(refused(&owner, "TLS protocol versions"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(refused(
            &owner,
            "tls_cert and tls_key do not make a usable pair",
        ))?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Some(TlsAcceptor::from(Arc::new(config))))
}

/// Whether a network sink's `endpoint` is `https://`; `tls_ca` without it is an error.
fn https(sink: &Sink) -> Result<bool, GatewayError> {
    let endpoint = sink.options.str("endpoint").unwrap_or_default();
    if !endpoint.starts_with("https://") && sink.options.str("tls_ca").is_some() {
        return Err(GatewayError::TlsCaWithoutHttps {
            sink_name: sink.name.clone(),
        });
    }
    Ok(endpoint.starts_with("https://"))
}

/// The client TLS settings of a gRPC sink with an `https://` endpoint; `None` for `http://`.
pub fn client(
    sink: &Sink,
    base: &Path,
) -> Result<Option<tonic::transport::ClientTlsConfig>, GatewayError> {
    if !https(sink)? {
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

/// The rustls client settings of an HTTP sink with an `https://` endpoint, offering `alpn`
/// protocols and trusting `tls_ca` or else the system's roots; `None` for `http://`.
pub fn client_config(
    sink: &Sink,
    base: &Path,
    alpn: &[&[u8]],
) -> Result<Option<Arc<rustls::ClientConfig>>, GatewayError> {
    if !https(sink)? {
        return Ok(None);
    }
    let owner = format!("sink {}", sink.name);
    let mut roots = rustls::RootCertStore::empty();
    match sink.options.str("tls_ca") {
        Some(ca) => {
            for cert in CertificateDer::pem_slice_iter(&read(&owner, base, ca)?) {
                let cert = cert.map_err(|source| GatewayError::TlsCa {
                    owner: owner.clone(),
                    path: ca.to_string(),
                    source,
                })?;
                roots
                    .add(cert)
                    .map_err(refused(&owner, "a tls_ca certificate"))?;
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
        }
    }
    if roots.is_empty() {
        return Err(GatewayError::NoTrustedRoots { owner });
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(refused(&owner, "TLS protocol versions"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Some(Arc::new(config)))
}
