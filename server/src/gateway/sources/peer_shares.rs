//! Each peer address's share of a worker's request bytes in flight: one client sending more
//! than the others can take at most `max_in_flight_bytes_per_peer` of them, so the rest stay
//! for everyone else. A peer past its share waits (or is refused, with `admission =
//! 'refuse'`) without holding any of the worker's bytes meanwhile.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};

/// The shares of the peers with bytes in flight (or waiting for some).
#[derive(Debug)]
pub struct PeerShares {
    /// Bytes one peer may have in flight.
    share: usize,
    peers: Mutex<HashMap<IpAddr, Arc<Semaphore>>>,
}

/// Why a peer's bytes were not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareRefusal {
    /// Its share is taken and it may not wait.
    Full,
    /// The gateway is stopping.
    Closed,
}

impl PeerShares {
    /// Shares of `share` bytes each.
    pub fn new(share: usize) -> Arc<PeerShares> {
        Arc::new(PeerShares {
            share: share.max(1),
            peers: Mutex::default(),
        })
    }

    /// Takes `bytes` (at most a whole share) of `peer`'s share: at once, or waiting when `wait`.
    pub async fn take(
        self: &Arc<Self>,
        peer: IpAddr,
        bytes: usize,
        wait: bool,
    ) -> Result<PeerBytes, ShareRefusal> {
        let wanted = bytes.clamp(1, self.share).min(u32::MAX as usize) as u32;
        let semaphore = {
            let mut peers = self
                .peers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            Arc::clone(
                peers
                    .entry(peer)
                    .or_insert_with(|| Arc::new(Semaphore::new(self.share))),
            )
        };
        let taken = if wait {
            Arc::clone(&semaphore)
                .acquire_many_owned(wanted)
                .await
                .map_err(|_| ShareRefusal::Closed)
        } else {
            Arc::clone(&semaphore)
                .try_acquire_many_owned(wanted)
                .map_err(|e| match e {
                    TryAcquireError::NoPermits => ShareRefusal::Full,
                    TryAcquireError::Closed => ShareRefusal::Closed,
                })
        };
        let permit = match taken {
            Ok(permit) => permit,
            Err(refusal) => {
                drop(semaphore);
                self.forget_if_unused(peer);
                return Err(refusal);
            }
        };
        drop(semaphore);
        Ok(PeerBytes {
            shares: Arc::clone(self),
            peer,
            permit: Some(permit),
        })
    }

    /// Forgets `peer` once it has nothing in flight and nobody waits on its share.
    fn forget_if_unused(&self, peer: IpAddr) {
        let mut peers = self
            .peers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let unused = peers.get(&peer).is_some_and(|semaphore| {
            Arc::strong_count(semaphore) == 1 && semaphore.available_permits() == self.share
        });
        if unused {
            peers.remove(&peer);
        }
    }

    /// Peers followed now.
    pub fn peers(&self) -> usize {
        self.peers.lock().map_or(0, |p| p.len())
    }
}

/// Bytes of a peer's share, given back when dropped.
#[derive(Debug)]
pub struct PeerBytes {
    shares: Arc<PeerShares>,
    peer: IpAddr,
    permit: Option<OwnedSemaphorePermit>,
}

impl Drop for PeerBytes {
    fn drop(&mut self) {
        // The permit holds the semaphore: given back first, the share may be forgotten.
        drop(self.permit.take());
        self.shares.forget_if_unused(self.peer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    #[tokio::test]
    async fn a_peer_past_its_share_leaves_room_for_others_and_is_forgotten_when_done() {
        let shares = PeerShares::new(100);
        let held = shares.take(A, 80, false).await.unwrap();
        assert_eq!(
            shares.take(A, 30, false).await.unwrap_err(),
            ShareRefusal::Full
        );
        let other = shares.take(B, 100, false).await.unwrap();
        // A waiting peer gets its bytes once its own are given back.
        let waiting = tokio::spawn({
            let shares = Arc::clone(&shares);
            async move { shares.take(A, 30, true).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(held);
        waiting.await.unwrap().unwrap();
        drop(other);
        assert_eq!(
            shares.peers(),
            0,
            "peers with nothing in flight are forgotten"
        );
        // More than a share is taken as a whole share.
        let whole = shares.take(A, 1 << 20, false).await.unwrap();
        assert_eq!(
            shares.take(A, 1, false).await.unwrap_err(),
            ShareRefusal::Full
        );
        drop(whole);
    }
}
