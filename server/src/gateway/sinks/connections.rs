//! Connections for streams that each need one of their own (forwarded OTAP input streams, one
//! output stream each). A backend limits the streams open at once on one HTTP/2 connection
//! (its SETTINGS_MAX_CONCURRENT_STREAMS: 100 to 250 is common, grpc-go sets no limit), and a
//! stream past that limit waits for another to end, so streams are spread over as many
//! connections as `per_connection` streams each require.

use std::sync::Arc;

use super::upstream::Upstream;

/// The connections of a sink's own-stream traffic.
pub struct Connections {
    /// Where new connections go (its own connection is left to the sink's shared streams).
    template: Upstream,
    per_connection: usize,
    /// Each connection, and the places taken on it (one reference per open stream).
    open: Vec<(Upstream, Arc<()>)>,
}

/// A stream's place on its connection, given back when dropped.
#[derive(Debug)]
pub struct ConnectionPlace {
    _held: Arc<()>,
}

impl Connections {
    /// Connections like `template`'s, with at most `per_connection` streams each.
    pub fn new(template: Upstream, per_connection: usize) -> Connections {
        Connections {
            template,
            per_connection: per_connection.max(1),
            open: Vec::new(),
        }
    }

    /// A connection with room for one more stream (a new one when all are full), and the
    /// stream's place on it.
    pub fn take(&mut self) -> (Upstream, ConnectionPlace) {
        let mut idle_kept = false;
        // Connections left without streams are closed, but one.
        self.open.retain(|(_, places)| {
            let idle = Arc::strong_count(places) == 1;
            let keep = !idle || !idle_kept;
            idle_kept |= idle;
            keep
        });
        let per_connection = self.per_connection;
        let found = self
            .open
            .iter()
            .find(|(_, places)| Arc::strong_count(places) - 1 < per_connection);
        let (upstream, places) = match found {
            Some((upstream, places)) => (upstream.clone(), Arc::clone(places)),
            None => {
                let connection = (self.template.another(), Arc::new(()));
                self.open.push(connection.clone());
                connection
            }
        };
        (upstream, ConnectionPlace { _held: places })
    }

    /// Connections open.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_spread_over_connections_and_idle_ones_close() {
        let endpoint = tonic::transport::Endpoint::from_static("http://127.0.0.1:9");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        let mut connections = Connections::new(Upstream::lazy(endpoint), 2);
        let places: Vec<ConnectionPlace> = (0..5).map(|_| connections.take().1).collect();
        assert_eq!(connections.len(), 3, "2 + 2 + 1 streams");
        drop(places);
        let _one = connections.take();
        assert_eq!(connections.len(), 1, "idle connections closed but one");
    }
}
