//! How the query service runs: where it listens, how long and how much a query may take.

use std::net::SocketAddr;
use std::time::Duration;

use super::access::Scope;

/// How the query service runs.
#[derive(Debug, Clone)]
pub struct QueryOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// How long a live query reads when the call does not say.
    pub default_for: Duration,
    /// The longest a live query may read (and the most a query may run past that).
    pub max_for: Duration,
    /// Queries running at once; beyond that, RESOURCE_EXHAUSTED.
    pub max_queries: usize,
    /// Memory each query's operators may hold.
    pub memory_bytes: usize,
    /// Bytes of recent batches kept for `recent.*`.
    pub recent_bytes: usize,
    /// Who may call, and what each may read.
    pub credentials: Credentials,
    /// The certificate chain and private key (PEM files) to serve TLS with, if any.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// The CA certificates (PEM) that client certificates are verified with (mutual TLS), if
    /// any: a verified client's subject names its principal.
    pub client_ca: Option<std::path::PathBuf>,
}

/// Who may call the query service (see [`super::access`]).
#[derive(Debug, Clone, Default)]
pub enum Credentials {
    /// Anyone, reading everything.
    #[default]
    None,
    /// The holder of one token (`authorization: Bearer TOKEN`), reading what `scope` reads.
    Token {
        /// The token.
        token: Secret,
        /// What its holder reads.
        scope: Scope,
    },
    /// The principals of a file, reloaded on SIGHUP.
    File(std::path::PathBuf),
}

/// A credential, which debug output does not show.
#[derive(Clone)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("(secret)")
    }
}

impl QueryOptions {
    /// The defaults, listening on `listen`.
    pub fn on(listen: SocketAddr) -> QueryOptions {
        QueryOptions {
            listen,
            default_for: Duration::from_secs(10),
            max_for: Duration::from_secs(300),
            max_queries: 8,
            memory_bytes: 256 << 20,
            recent_bytes: 64 << 20,
            credentials: Credentials::None,
            tls: None,
            client_ca: None,
        }
    }

    /// Sizes the live-query buffers to fit under a memory limit of `limit` bytes: recent
    /// batches at most an eighth of it, the memory of all queries at once at most a quarter.
    pub fn fit(&mut self, limit: u64) {
        let recent = (limit / 8) as usize;
        let per_query = (limit / 4) as usize / self.max_queries.max(1);
        if self.recent_bytes > recent || self.memory_bytes > per_query {
            self.recent_bytes = self.recent_bytes.min(recent);
            self.memory_bytes = self.memory_bytes.min(per_query);
            tracing::info!(
                "memory limit {} MiB: live queries keep {} MiB of recent batches and use at \
                 most {} MiB each",
                limit >> 20,
                self.recent_bytes >> 20,
                self.memory_bytes >> 20
            );
        }
    }
}
