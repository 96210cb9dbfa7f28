//! The response body ([`TestBody`]): a literal or filler body handed over in chunks, with an
//! optional pause between them, counting what was sent.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use hyper::header::HeaderValue;
use hyper::{Response, StatusCode};
use tokio::time::Sleep;

/// Where body bytes come from.
pub(crate) enum Source {
    /// The literal `body`.
    Literal(Bytes),
    /// `body_bytes` of `x`: one chunk-sized buffer, sliced.
    Filler(Bytes),
}

/// The response body: `total` bytes in chunks of `chunk`, `delay` between chunks.
pub(crate) struct TestBody {
    pub(crate) source: Source,
    pub(crate) offset: u64,
    pub(crate) total: u64,
    pub(crate) chunk: u64,
    pub(crate) delay: Duration,
    pub(crate) sleep: Option<Pin<Box<Sleep>>>,
    pub(crate) exact: bool,
    pub(crate) sent: Arc<AtomicU64>,
}

impl Body for TestBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.offset >= this.total {
            return Poll::Ready(None);
        }
        if this.offset > 0 && !this.delay.is_zero() {
            // `chunk_delay_ms`: the slow origin a test asked for, not a synchronisation.
            let sleep = this
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(this.delay)));
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.sleep = None;
        }
        let n = this.chunk.min(this.total - this.offset);
        let data = match &this.source {
            Source::Literal(b) => b.slice(this.offset as usize..(this.offset + n) as usize),
            Source::Filler(b) => b.slice(..n as usize),
        };
        this.offset += n;
        this.sent.fetch_add(n, Ordering::Relaxed);
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.offset >= self.total
    }

    fn size_hint(&self) -> SizeHint {
        if self.exact {
            SizeHint::with_exact(self.total - self.offset)
        } else {
            SizeHint::default()
        }
    }
}

pub(crate) fn plain(status: StatusCode, text: String) -> Response<TestBody> {
    let bytes = Bytes::from(text);
    let total = bytes.len() as u64;
    let mut r = Response::new(TestBody {
        source: Source::Literal(bytes),
        offset: 0,
        total,
        chunk: total.max(1),
        delay: Duration::ZERO,
        sleep: None,
        exact: true,
        sent: Arc::new(AtomicU64::new(0)),
    });
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}
