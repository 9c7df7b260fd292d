//! The HTTP client of an OTLP/HTTP sink: hyper's pooled client (kept-alive connections,
//! reused across requests) over TCP, with rustls for `https://` endpoints. Over TLS it
//! offers HTTP/2 and HTTP/1.1 (ALPN) and uses what the server picks; plain connections
//! speak HTTP/1.1.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Uri;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::ServerName;
use tower_service::Service;

use crate::gateway::base::tls::HANDSHAKE_TIMEOUT;

/// How long a TCP connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an idle connection is kept for the next request.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The protocols offered over TLS, preferred first.
pub const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// A pooled HTTP client whose requests carry a byte body.
pub type HttpClient = Client<Connector, Full<Bytes>>;

/// A client for one sink; `tls` (with [`ALPN`]) is used for `https://` URLs.
pub fn client(tls: Option<Arc<rustls::ClientConfig>>) -> HttpClient {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    let connector = Connector {
        http,
        tls: tls.map(TlsConnector::from),
    };
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(IDLE_TIMEOUT)
        .pool_timer(TokioTimer::new())
        .build(connector)
}

/// Opens connections: TCP, then TLS for `https://` URLs.
#[derive(Clone)]
pub struct Connector {
    http: HttpConnector,
    tls: Option<TlsConnector>,
}

/// Why a connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The TCP connection failed.
    #[error("connecting")]
    Tcp(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// An `https://` URL without TLS settings, or without a host.
    #[error("no TLS settings for {0}")]
    NoTls(Uri),
    /// The host is not a name TLS can verify.
    #[error("'{0}' is not a TLS server name")]
    ServerName(String),
    /// The TLS handshake failed.
    #[error("TLS handshake")]
    Handshake(#[source] std::io::Error),
    /// The TLS handshake took too long.
    #[error("no TLS handshake within {HANDSHAKE_TIMEOUT:?}")]
    HandshakeTimeout,
}

impl Service<Uri> for Connector {
    type Response = TokioIo<HttpConnection>;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let mut http = self.http.clone();
        let tls = self.tls.clone();
        Box::pin(async move {
            std::future::poll_fn(|cx| http.poll_ready(cx))
                .await
                .map_err(|e| ConnectError::Tcp(e.into()))?;
            let tcp = http
                .call(uri.clone())
                .await
                .map_err(|e| ConnectError::Tcp(e.into()))?
                .into_inner();
            if uri.scheme() != Some(&http::uri::Scheme::HTTPS) {
                return Ok(TokioIo::new(HttpConnection::Plain(tcp)));
            }
            let (Some(tls), Some(host)) = (tls, uri.host()) else {
                return Err(ConnectError::NoTls(uri));
            };
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let name = ServerName::try_from(host.to_string())
                .map_err(|_| ConnectError::ServerName(host.to_string()))?;
            let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.connect(name, tcp))
                .await
                .map_err(|_| ConnectError::HandshakeTimeout)?
                .map_err(ConnectError::Handshake)?;
            Ok(TokioIo::new(HttpConnection::Tls(Box::new(stream))))
        })
    }
}

/// A connection: plain TCP or TLS over TCP.
pub enum HttpConnection {
    /// `http://`.
    Plain(TcpStream),
    /// `https://`.
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connection for HttpConnection {
    fn connected(&self) -> Connected {
        match self {
            HttpConnection::Tls(tls) if tls.get_ref().1.alpn_protocol() == Some(b"h2") => {
                Connected::new().negotiated_h2()
            }
            _ => Connected::new(),
        }
    }
}

impl AsyncRead for HttpConnection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            HttpConnection::Plain(s) => Pin::new(s).poll_read(cx, buf),
            HttpConnection::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for HttpConnection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            HttpConnection::Plain(s) => Pin::new(s).poll_write(cx, buf),
            HttpConnection::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            HttpConnection::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            HttpConnection::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            HttpConnection::Plain(s) => s.is_write_vectored(),
            HttpConnection::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            HttpConnection::Plain(s) => Pin::new(s).poll_flush(cx),
            HttpConnection::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            HttpConnection::Plain(s) => Pin::new(s).poll_shutdown(cx),
            HttpConnection::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
