//! Writes gathered until the runtime has run every ready task, then sent in one system call.
//!
//! An HTTP/2 connection flushes as soon as it has encoded what is queued. A
//! unary response's trailers wait behind a data frame hyper hands over by
//! reference, and a new request's body is queued by another task only once
//! its HEADERS frame has opened the stream; so each call left in two writes
//! and woke the peer twice. [`Coalesced`] copies what is written and, at a
//! flush, first lets every task that is ready run (it wakes itself and
//! yields once: a current-thread runtime runs it again after the tasks
//! already queued), so the frames those tasks queue meanwhile leave with
//! the rest. On a multi-thread runtime that wake would go through another
//! worker and cost more than the write it saves, so there writes go
//! straight through.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes held before a write goes through without waiting for a flush.
const HOLD_LIMIT: usize = 64 * 1024;

/// An IO whose writes are sent at the next flush, after the runtime has run
/// the tasks that are ready (on a current-thread runtime; elsewhere it
/// passes writes through).
pub struct Coalesced<T> {
    inner: T,
    /// Whether writes are held for a flush (made on a current-thread runtime).
    holds: bool,
    /// Accepted, not yet written; `written` bytes of it have been.
    held: Vec<u8>,
    written: usize,
    /// Set while a flush waits for the ready tasks to run.
    yielded: bool,
}

impl<T> std::fmt::Debug for Coalesced<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalesced")
            .field("held", &(self.held.len() - self.written))
            .finish_non_exhaustive()
    }
}

impl<T> Coalesced<T> {
    /// Wraps `inner`; writes are held when this runs on a current-thread
    /// runtime, which then drives the connection.
    pub fn new(inner: T) -> Self {
        let holds = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread);
        Coalesced {
            inner,
            holds,
            held: Vec::new(),
            written: 0,
            yielded: false,
        }
    }

    /// The wrapped IO.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }
}

impl<T: AsyncWrite + Unpin> Coalesced<T> {
    /// Writes everything held.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.held.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.held[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.held.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Coalesced<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesced<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if !this.holds {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        }
        if this.held.len() + buf.len() > HOLD_LIMIT {
            ready!(this.poll_drain(cx))?;
            if buf.len() > HOLD_LIMIT {
                return Pin::new(&mut this.inner).poll_write(cx, buf);
            }
        }
        this.held.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if !self.holds {
            return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if self.held.len() + total > HOLD_LIMIT {
            // More than fits: go the plain way, one slice at a time.
            let first = bufs
                .iter()
                .find(|b| !b.is_empty())
                .map_or(&[][..], |b| &**b);
            return self.poll_write(cx, first);
        }
        for buf in bufs {
            self.held.extend_from_slice(buf);
        }
        Poll::Ready(Ok(total))
    }

    fn is_write_vectored(&self) -> bool {
        self.holds || self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.written < this.held.len() {
            if !this.yielded {
                this.yielded = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            ready!(this.poll_drain(cx))?;
            this.yielded = false;
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Coalesced<tokio::net::TcpStream> {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Writes before a flush reach the peer together, and only at the flush.
    #[tokio::test]
    async fn writes_leave_at_the_flush() {
        let (near, mut far) = tokio::io::duplex(1 << 20);
        let mut near = Coalesced::new(near);
        near.write_all(b"headers;").await.unwrap();
        let parts = [io::IoSlice::new(b"da"), io::IoSlice::new(b"ta;")];
        assert_eq!(near.write_vectored(&parts).await.unwrap(), 5);
        let mut buf = [0u8; 64];
        let early = tokio::time::timeout(std::time::Duration::from_millis(20), far.read(&mut buf));
        assert!(early.await.is_err(), "nothing leaves before the flush");
        near.write_all(b"trailers").await.unwrap();
        near.flush().await.unwrap();
        let n = far.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"headers;data;trailers");
    }

    /// Frames another task queues while a flush waits for its turn leave
    /// in the same write, as an HTTP/2 connection task would send them.
    #[tokio::test(flavor = "current_thread")]
    async fn a_flush_lets_ready_tasks_queue_first() {
        let (near, mut far) = tokio::io::duplex(1 << 20);
        let queue = std::sync::Arc::new(std::sync::Mutex::new(vec![&b"HEADERS "[..]]));
        // The body is queued once the HEADERS have opened the stream, by a
        // task the connection wakes, as hyper's request body is.
        let (open, opened) = tokio::sync::oneshot::channel::<()>();
        let body = {
            let queue = queue.clone();
            tokio::spawn(async move {
                opened.await.unwrap();
                queue.lock().unwrap().push(b"DATA");
            })
        };
        tokio::task::yield_now().await;
        let mut open = Some(open);
        let mut io = Coalesced::new(near);
        let connection = tokio::spawn(std::future::poll_fn(move |cx| {
            loop {
                let frames: Vec<_> = queue.lock().unwrap().drain(..).collect();
                for frame in frames {
                    let n = ready!(Pin::new(&mut io).poll_write(cx, frame)).unwrap();
                    assert_eq!(n, frame.len());
                }
                if let Some(open) = open.take() {
                    open.send(()).unwrap();
                }
                ready!(Pin::new(&mut io).poll_flush(cx)).unwrap();
                if queue.lock().unwrap().is_empty() {
                    return Poll::Ready(());
                }
            }
        }));
        connection.await.unwrap();
        body.await.unwrap();
        let mut buf = [0u8; 64];
        let n = far.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"HEADERS DATA", "one write, both frames");
    }

    /// On a multi-thread runtime writes go straight through, flush or not.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn passes_through_on_a_multi_thread_runtime() {
        let (near, mut far) = tokio::io::duplex(1024);
        let mut near = Coalesced::new(near);
        near.write_all(b"now").await.unwrap();
        let mut buf = [0u8; 8];
        let n = far.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"now");
    }

    /// Writes beyond the limit go out without waiting for a flush, in order.
    #[tokio::test]
    async fn large_writes_pass_through_in_order() {
        let (near, mut far) = tokio::io::duplex(1 << 20);
        let mut near = Coalesced::new(near);
        let big = vec![7u8; HOLD_LIMIT + 1];
        near.write_all(b"head").await.unwrap();
        near.write_all(&big).await.unwrap();
        near.write_all(b"tail").await.unwrap();
        near.shutdown().await.unwrap();
        let mut all = Vec::new();
        far.read_to_end(&mut all).await.unwrap();
        assert_eq!(all.len(), 4 + big.len() + 4);
        assert_eq!(&all[..4], b"head");
        assert!(all[4..4 + big.len()].iter().all(|&b| b == 7));
        assert_eq!(&all[all.len() - 4..], b"tail");
    }
}
