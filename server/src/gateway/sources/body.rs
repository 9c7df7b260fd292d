//! Request bodies of listening sources: a deadline for those being received, and discarding
//! what a refused request still sends.

use std::time::Duration;

/// The longest a refused request's body is read (and thrown away) before the refusal goes.
pub const DISCARD_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads and throws away what the client still sends of a refused request's body (up to
/// `limit` bytes and [`DISCARD_TIMEOUT`]), so that the refusal comes after the request:
/// HTTP/2 clients that do not expect an early answer (hyper's, so tonic's) report a
/// response that arrives while they still send as a broken pipe instead of the status. The
/// bytes are not kept, and reading them gives the connection's window back at once. Returns
/// how many were thrown away.
pub async fn discard_body(body: hyper::body::Incoming, limit: usize) -> usize {
    use http_body_util::BodyExt;
    let mut body = body;
    let mut read = 0usize;
    let discard = async {
        while read < limit {
            match body.frame().await {
                Some(Ok(frame)) => read += frame.data_ref().map_or(0, |d| d.len()),
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout(DISCARD_TIMEOUT, discard).await;
    read
}

/// The longest an OTLP request's body may take to arrive once it has a receiving place: a
/// sender that trickles its body in cannot keep a place (and the places are few).
pub const RECEIVE_TIMEOUT: Duration = Duration::from_secs(30);

/// A request body that must arrive by a deadline: past it, reading it fails, so the request
/// is refused and its receiving place given back.
pub struct Deadline<B> {
    body: B,
    expiry: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl<B> Deadline<B> {
    /// `body`, due within `timeout` from now.
    pub fn new(body: B, timeout: Duration) -> Self {
        Deadline {
            body,
            expiry: Box::pin(tokio::time::sleep(timeout)),
        }
    }
}

impl<B> http_body::Body for Deadline<B>
where
    B: http_body::Body + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = B::Data;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<B::Data>, Self::Error>>> {
        let this = self.get_mut();
        if this.expiry.as_mut().poll(cx).is_ready() {
            let message = format!(
                "the request body did not arrive within {} s",
                RECEIVE_TIMEOUT.as_secs()
            );
            return std::task::Poll::Ready(Some(Err(message.into())));
        }
        std::pin::Pin::new(&mut this.body)
            .poll_frame(cx)
            .map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
