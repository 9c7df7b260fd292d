//! A byte stream that makes fewer system calls: [`Gathered`] collects the small writes an
//! HTTP/2 connection makes (one per 16 KiB frame) into one write per turn of the
//! connection's task, and reads ahead in large chunks where HTTP/2 asks for 8 KiB at a time.
//!
//! A flush that follows new bytes is put off: the task is woken, and the bytes go out on its
//! next turn (its first read sends them, as does a flush with nothing new since the one put
//! off, or a shutdown), so frames queued in the meantime leave in the same write. At most [`GATHER_LIMIT`] bytes wait; past that a write sends first, and
//! waits for the socket like any write would (backpressure is unchanged).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes gathered at most before they are sent.
pub const GATHER_LIMIT: usize = 128 * 1024;

/// Bytes asked of the socket at once when the reader asks for less.
pub const READ_AHEAD: usize = 64 * 1024;

/// A byte stream whose small writes are gathered and whose small reads are served from one
/// larger read. See the module's documentation.
#[derive(Debug)]
pub struct Gathered<T> {
    inner: T,
    /// Written, not yet sent.
    out: Vec<u8>,
    /// Bytes were written since the last flush was put off.
    fresh: bool,
    /// Read ahead, not yet handed out; unallocated while the peer is idle.
    ahead: BytesMut,
}

impl<T> Gathered<T> {
    /// `inner` with nothing gathered or read ahead yet.
    pub fn new(inner: T) -> Gathered<T> {
        Gathered {
            inner,
            out: Vec::new(),
            fresh: false,
            ahead: BytesMut::new(),
        }
    }
}

impl<T: AsyncWrite + Unpin> Gathered<T> {
    /// Sends what was gathered; ready once all of it is with the socket.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut sent = 0;
        let result = loop {
            if sent == self.out.len() {
                break Poll::Ready(Ok(()));
            }
            match Pin::new(&mut self.inner).poll_write(cx, &self.out[sent..]) {
                Poll::Ready(Ok(0)) => break Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => sent += n,
                Poll::Ready(Err(e)) => break Poll::Ready(Err(e)),
                Poll::Pending => break Poll::Pending,
            }
        };
        self.out.drain(..sent);
        result
    }

    /// Makes room for `len` more bytes, sending what was gathered when they would not fit:
    /// ready with true when they are to be gathered, false when they go to the socket
    /// straight (nothing waits, and they fill a write on their own).
    fn poll_gather(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<bool>> {
        if !self.out.is_empty() && self.out.len() + len > GATHER_LIMIT {
            ready!(self.poll_send(cx))?;
        }
        if self.out.is_empty() && len >= GATHER_LIMIT {
            return Poll::Ready(Ok(false));
        }
        if self.out.capacity() == 0 {
            self.out.reserve_exact(GATHER_LIMIT);
        }
        self.fresh = true;
        Poll::Ready(Ok(true))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Gathered<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !ready!(this.poll_gather(cx, buf.len()))? {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        }
        this.out.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if !ready!(this.poll_gather(cx, len))? {
            return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        }
        for buf in bufs {
            this.out.extend_from_slice(buf);
        }
        Poll::Ready(Ok(len))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.out.is_empty() {
            return Pin::new(&mut this.inner).poll_flush(cx);
        }
        if std::mem::take(&mut this.fresh) {
            // Put off: the task comes back at once, after whatever else is ready to run has
            // had the chance to queue more frames.
            cx.waker().wake_by_ref();
            return Poll::Ready(Ok(()));
        }
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for Gathered<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        // A turn of the task that reads sends what an earlier turn put off.
        if !this.out.is_empty() {
            this.fresh = false;
            if let Poll::Ready(Err(e)) = this.poll_send(cx) {
                return Poll::Ready(Err(e));
            }
        }
        if this.ahead.is_empty() {
            if buf.remaining() >= READ_AHEAD {
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            this.ahead.reserve(READ_AHEAD);
            let polled =
                tokio_util::io::poll_read_buf(Pin::new(&mut this.inner), cx, &mut this.ahead);
            if polled.is_pending() {
                // Idle: the buffers go back until there is traffic again.
                this.ahead = BytesMut::new();
                if this.out.is_empty() {
                    this.out = Vec::new();
                }
            }
            ready!(polled)?;
        }
        let n = buf.remaining().min(this.ahead.len());
        buf.put_slice(&this.ahead[..n]);
        this.ahead.advance(n);
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    use std::task::Wake;

    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    use super::*;

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Relaxed);
        }
    }

    /// Bytes the peer has received so far, without waiting.
    fn received(peer: &mut tokio::io::DuplexStream) -> Vec<u8> {
        let wakes = Arc::new(Wakes::default());
        let waker = std::task::Waker::from(wakes);
        let mut cx = Context::from_waker(&waker);
        let mut out = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let mut buf = ReadBuf::new(&mut chunk);
            match Pin::new(&mut *peer).poll_read(&mut cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                    out.extend_from_slice(buf.filled())
                }
                _ => return out,
            }
        }
    }

    #[test]
    fn a_flush_after_new_bytes_is_put_off_and_the_task_woken_to_send_them() {
        let (ours, mut peer) = duplex(1 << 20);
        let mut gathered = Gathered::new(ours);
        let wakes = Arc::new(Wakes::default());
        let waker = std::task::Waker::from(Arc::clone(&wakes));
        let mut cx = Context::from_waker(&waker);
        let mut io = Pin::new(&mut gathered);
        for frame in [&b"first "[..], b"second ", b"third"] {
            assert!(
                matches!(io.as_mut().poll_write(&mut cx, frame), Poll::Ready(Ok(n)) if n == frame.len())
            );
        }
        assert!(matches!(
            io.as_mut().poll_flush(&mut cx),
            Poll::Ready(Ok(()))
        ));
        assert_eq!(wakes.0.load(Relaxed), 1, "the task comes back to send");
        assert!(received(&mut peer).is_empty(), "nothing sent yet");
        // More frames queued before the task's next turn leave with the first ones.
        assert!(io.as_mut().poll_write(&mut cx, b" fourth").is_ready());
        assert!(matches!(
            io.as_mut().poll_flush(&mut cx),
            Poll::Ready(Ok(()))
        ));
        assert!(received(&mut peer).is_empty());
        // The next turn flushes with nothing new: everything goes, in order, at once.
        assert!(matches!(
            io.as_mut().poll_flush(&mut cx),
            Poll::Ready(Ok(()))
        ));
        assert_eq!(received(&mut peer), b"first second third fourth");
        assert_eq!(wakes.0.load(Relaxed), 2);
    }

    #[tokio::test]
    async fn a_read_sends_what_a_put_off_flush_left() {
        let (ours, mut peer) = duplex(1 << 20);
        let mut gathered = Gathered::new(ours);
        gathered.write_all(b"request").await.expect("write");
        gathered.flush().await.expect("flush");
        assert!(received(&mut peer).is_empty());
        // The connection's next turn reads first: that sends the request.
        let reading = async {
            let mut answer = [0u8; 6];
            gathered.read_exact(&mut answer).await.expect("read");
            answer
        };
        let answering = async {
            let mut request = [0u8; 7];
            peer.read_exact(&mut request).await.expect("peer reads");
            assert_eq!(&request, b"request");
            peer.write_all(b"answer").await.expect("peer answers");
        };
        let (answer, ()) = tokio::join!(reading, answering);
        assert_eq!(&answer, b"answer");
    }

    #[tokio::test]
    async fn reads_made_ahead_hand_out_every_byte_in_order() {
        let (ours, mut peer) = duplex(1 << 20);
        let mut gathered = Gathered::new(ours);
        let sent: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let sending = async {
            for chunk in sent.chunks(40_000) {
                peer.write_all(chunk).await.expect("peer writes");
            }
            peer.shutdown().await.expect("peer closes");
            peer
        };
        let reading = async {
            let mut got = Vec::new();
            let mut small = [0u8; 8192];
            loop {
                let n = gathered.read(&mut small).await.expect("read");
                if n == 0 {
                    return got;
                }
                got.extend_from_slice(&small[..n]);
            }
        };
        let (_peer, got) = tokio::join!(sending, reading);
        assert_eq!(got, sent);
    }

    #[tokio::test]
    async fn writes_past_the_limit_wait_for_the_socket() {
        // The peer's pipe holds 64 KiB; nothing reads it yet.
        let (ours, mut peer) = duplex(64 << 10);
        let mut gathered = Gathered::new(ours);
        let wakes = Arc::new(Wakes::default());
        let waker = std::task::Waker::from(Arc::clone(&wakes));
        let mut cx = Context::from_waker(&waker);
        let frame = vec![7u8; 16 << 10];
        let mut taken = 0;
        while let Poll::Ready(Ok(n)) = Pin::new(&mut gathered).poll_write(&mut cx, &frame) {
            taken += n;
            assert!(
                taken <= GATHER_LIMIT + (64 << 10),
                "bounded: {taken} bytes taken"
            );
        }
        assert!(taken >= GATHER_LIMIT, "gathers up to the limit: {taken}");
        // Once the peer reads, what waited goes out.
        let mut drained = received(&mut peer).len();
        while drained < taken {
            let _ = Pin::new(&mut gathered).poll_flush(&mut cx);
            let _ = Pin::new(&mut gathered).poll_flush(&mut cx);
            drained += received(&mut peer).len();
        }
        assert_eq!(drained, taken);
    }
}
