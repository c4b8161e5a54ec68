//! A blocking client for synchronous code.
//!
//! [`Client`] runs the async client's connections on **its own runtime
//! thread** (a current-thread tokio runtime that the client owns, driving the
//! sockets and timers); each call runs its own request on the calling thread
//! (`Handle::block_on`: no task and no channel per call). Called from inside
//! a runtime of the caller, a call is handed to the client's thread instead
//! and waited for on a plain channel: it never blocks or panics a runtime of
//! the caller (though async code should use [`crate::Client`]).
//!
//! ```no_run
//! use std::time::Duration;
//! let client = ticketing::blocking::Client::connect(
//!     ticketing::Config::builder().addr("127.0.0.1:7470").build()?,
//! )?;
//! if let Some(lease) = client.try_acquire("reports/daily", Duration::from_secs(60))? {
//!     // ... work, passing lease.token() to the protected resource ...
//!     lease.release()?;
//! }
//! # Ok::<(), ticketing::Error>(())
//! ```

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

use crate::{AcquireOptions, Config, Error, ErrorKind};

struct Runtime {
    handle: tokio::runtime::Handle,
    stop: Mutex<Option<oneshot::Sender<()>>>,
    /// The process that started the runtime thread (edge rule R9: after
    /// fork() the child has no such thread and must not touch the parent's
    /// sockets).
    pid: u32,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.lock().unwrap().take() {
            let _ = tx.send(());
        }
    }
}

impl Runtime {
    /// Whether this is the process the client was made in (not a fork child).
    fn home(&self) -> bool {
        std::process::id() == self.pid
    }

    fn run<F>(&self, f: F) -> Result<F::Output, Error>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        if !self.home() {
            // A forked child: the runtime thread did not survive fork(), so a
            // hand-off would wait forever. Closed, at once (README "Fork").
            return Err(ErrorKind::Closed.into());
        }
        self.run_home(f)
    }

    /// [`Runtime::run`] in the process that made the client (checked by the caller).
    fn run_home<F>(&self, f: F) -> Result<F::Output, Error>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        if tokio::runtime::Handle::try_current().is_err() {
            // The caller's thread polls its own request; the runtime thread
            // (in Runtime::block_on for the client's lifetime) drives the
            // sockets and timers (issue 33 finding 4: no hop per call).
            return Ok(block_on(&self.handle, f));
        }
        let (tx, rx) = mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let _ = tx.send(f.await);
        });
        rx.recv().map_err(|_| ErrorKind::Closed.into())
    }
}

/// How often, and for how long, a blocking caller yields its core before it
/// sleeps until its answer comes (issue 33 finding 4): with many callers on
/// few cores the answer usually arrives while the others run, and a caller
/// that never slept costs the thread that completes it no futex wake and
/// itself no context switch. Alone on a core each yield returns at once, so a
/// lone caller spins about `SPIN` (as the C client's blocking calls do).
const SPIN_YIELDS: u32 = 32;
const SPIN: Duration = Duration::from_micros(100);

/// The waker of a blocking caller: a flag and its thread.
struct Signal {
    woken: AtomicBool,
    thread: std::thread::Thread,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

thread_local! {
    static SIGNAL: Arc<Signal> = Arc::new(Signal {
        woken: AtomicBool::new(false),
        thread: std::thread::current(),
    });
}

/// Marks this thread as polling a blocking call (conn.rs DRIVEN) until dropped.
struct Driven;

impl Driven {
    fn enter() -> Driven {
        crate::conn::DRIVEN.with(|d| d.set(true));
        Driven
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        crate::conn::DRIVEN.with(|d| d.set(false));
    }
}

/// Polls `f` on the calling thread inside the client's runtime context (its
/// timers and spawns go to the runtime thread, which drives the sockets) and
/// waits for its wake-ups by yielding, then parking (no task, no channel, no
/// runtime hop per call).
fn block_on<F: Future>(handle: &tokio::runtime::Handle, f: F) -> F::Output {
    let _rt = handle.enter();
    SIGNAL.with(|sig| {
        let waker = Waker::from(sig.clone());
        let mut cx = Context::from_waker(&waker);
        let mut f = std::pin::pin!(f);
        loop {
            sig.woken.store(false, Ordering::Release);
            let r = {
                let _driven = Driven::enter();
                f.as_mut().poll(&mut cx)
            };
            if let Poll::Ready(v) = r {
                crate::conn::help_done();
                return v;
            }
            let spin_end = Instant::now() + SPIN;
            for i in 0..SPIN_YIELDS {
                if sig.woken.load(Ordering::Acquire) {
                    break;
                }
                // Read the answers that came (ours among them, maybe) rather
                // than wait for the runtime thread to.
                if crate::conn::help_read() {
                    continue;
                }
                std::thread::yield_now();
                if i & 3 == 3 && Instant::now() > spin_end {
                    break;
                }
            }
            while !sig.woken.load(Ordering::Acquire) {
                std::thread::park();
            }
        }
    })
}

/// The blocking client: the same operations as [`crate::Client`]. Cheap to
/// clone, `Send + Sync`.
#[derive(Clone)]
pub struct Client {
    inner: crate::Client,
    rt: Arc<Runtime>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl Client {
    /// Starts the client's runtime thread and connects (see
    /// [`crate::Client::connect`]).
    pub fn connect(cfg: Config) -> Result<Client, Error> {
        let mut cfg = cfg;
        cfg.direct_writes = true; // callers write their own frames (conn.rs)
        let (tx, rx) = mpsc::sync_channel(1);
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("ticketing-runtime".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = tx.send(Err(ErrorKind::Connect(format!("starting the runtime: {e}")).into()));
                        return;
                    }
                };
                let handle = rt.handle().clone();
                rt.block_on(async move {
                    let client = match crate::Client::connect(cfg).await {
                        Ok(c) => c,
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = tx.send(Ok((client.clone(), handle)));
                    let _ = stop_rx.await;
                    // Let background releases (dropped leases) finish, bounded.
                    let _ = tokio::time::timeout(Duration::from_secs(6), client.drain()).await;
                    client.close().await;
                });
            })
            .map_err(|e| Error::from(ErrorKind::Connect(format!("starting the runtime thread: {e}"))))?;
        let (inner, handle) = rx.recv().map_err(|_| Error::from(ErrorKind::Closed))??;
        Ok(Client {
            inner,
            rt: Arc::new(Runtime {
                handle,
                stop: Mutex::new(Some(stop_tx)),
                pid: std::process::id(),
            }),
        })
    }

    /// See [`crate::Client::acquire`].
    pub fn acquire(&self, key: impl AsRef<[u8]>, lease: Duration, wait: Duration) -> Result<Lease, Error> {
        self.acquire_with(key, lease, wait, &AcquireOptions::new())
    }

    /// See [`crate::Client::acquire_with`] (e.g. a minimum working time, R14).
    pub fn acquire_with(&self, key: impl AsRef<[u8]>, lease: Duration, wait: Duration, opts: &AcquireOptions) -> Result<Lease, Error> {
        self.acquire_with_cancel(key, lease, wait, opts, &CancelToken::new())
    }

    /// [`Client::acquire_with`] that `cancel` can withdraw from another
    /// thread (see [`Client::acquire_cancellable`]).
    pub fn acquire_with_cancel(
        &self,
        key: impl AsRef<[u8]>,
        lease: Duration,
        wait: Duration,
        opts: &AcquireOptions,
        cancel: &CancelToken,
    ) -> Result<Lease, Error> {
        let c = self.inner.clone();
        let key = key.as_ref().to_vec();
        let opts = opts.clone();
        let tok = cancel.clone();
        let l = self
            .rt
            .run(async move { tok.run(c.acquire_with(key, lease, wait, &opts)).await })??;
        Ok(self.lease(l))
    }

    /// See [`crate::Client::acquire_set`]: one lease for 2..=16 keys
    /// (protocol 1.1); its drop releases the whole set.
    pub fn acquire_set<K: AsRef<[u8]>>(&self, keys: &[K], lease: Duration, wait: Duration) -> Result<Lease, Error> {
        self.acquire_set_cancellable(keys, lease, wait, &CancelToken::new())
    }

    /// [`Client::acquire_set`] that `cancel` can withdraw from another thread.
    pub fn acquire_set_cancellable<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        lease: Duration,
        wait: Duration,
        cancel: &CancelToken,
    ) -> Result<Lease, Error> {
        let c = self.inner.clone();
        let keys: Vec<Vec<u8>> = keys.iter().map(|k| k.as_ref().to_vec()).collect();
        let tok = cancel.clone();
        let l = self.rt.run(async move { tok.run(c.acquire_set(&keys, lease, wait)).await })??;
        Ok(self.lease(l))
    }

    /// See [`crate::Client::release_set`].
    pub fn release_set<K: AsRef<[u8]>>(&self, keys: &[K], token: u64) -> Result<(), Error> {
        let c = self.inner.clone();
        let keys: Vec<Vec<u8>> = keys.iter().map(|k| k.as_ref().to_vec()).collect();
        self.rt.run(async move { c.release_set(&keys, token).await })?
    }

    fn lease(&self, l: crate::Lease) -> Lease {
        Lease {
            inner: Some(l),
            rt: self.rt.clone(),
            done: watch::Sender::new(false),
        }
    }

    /// [`Client::acquire`] that `cancel` can withdraw from another thread
    /// (edge rule R11): [`CancelToken::cancel`] makes it return
    /// [`Error::Cancelled`] at once; a queued acquire is withdrawn with `C`
    /// and a grant that won the race is released by the client.
    ///
    /// ```no_run
    /// # fn demo(client: ticketing::blocking::Client) -> Result<(), ticketing::Error> {
    /// use std::time::Duration;
    /// let cancel = ticketing::blocking::CancelToken::new();
    /// let c2 = cancel.clone();
    /// std::thread::spawn(move || { std::thread::sleep(Duration::from_secs(1)); c2.cancel(); });
    /// match client.acquire_cancellable("jobs/nightly", Duration::from_secs(60), Duration::from_secs(30), &cancel) {
    ///     Err(e) if *e.kind() == ticketing::ErrorKind::Cancelled => {} // withdrawn
    ///     other => drop(other?),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn acquire_cancellable(
        &self,
        key: impl AsRef<[u8]>,
        lease: Duration,
        wait: Duration,
        cancel: &CancelToken,
    ) -> Result<Lease, Error> {
        let c = self.inner.clone();
        let key = key.as_ref().to_vec();
        let tok = cancel.clone();
        let l = self.rt.run(async move { tok.run(c.acquire(key, lease, wait)).await })??;
        Ok(self.lease(l))
    }

    /// See [`crate::Client::try_acquire`].
    pub fn try_acquire(&self, key: impl AsRef<[u8]>, lease: Duration) -> Result<Option<Lease>, Error> {
        match self.acquire(key, lease, Duration::ZERO) {
            Ok(l) => Ok(Some(l)),
            Err(e) if *e.kind() == ErrorKind::Timeout => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// See [`crate::Client::try_acquire_for`]: `Ok(None)` when not acquired
    /// within `wait` (edge rule R13).
    pub fn try_acquire_for(&self, key: impl AsRef<[u8]>, lease: Duration, wait: Duration) -> Result<Option<Lease>, Error> {
        match self.acquire(key, lease, wait) {
            Ok(l) => Ok(Some(l)),
            Err(e) if *e.kind() == ErrorKind::Timeout => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// See [`crate::Client::release`].
    pub fn release(&self, key: impl AsRef<[u8]>, token: u64) -> Result<(), Error> {
        let c = self.inner.clone();
        let key = key.as_ref().to_vec();
        self.rt.run(async move { c.release(key, token).await })?
    }

    /// Runs `f` holding the lock, then releases it (awaited) and returns `f`'s
    /// result. A panic in `f` drops the lease, which releases it in the
    /// background.
    pub fn with_lock<T>(&self, key: impl AsRef<[u8]>, lease: Duration, wait: Duration, f: impl FnOnce(&Lease) -> T) -> Result<T, Error> {
        let l = self.acquire(key, lease, wait)?;
        let out = f(&l);
        let _ = l.release();
        Ok(out)
    }

    /// See [`crate::Client::drain`].
    pub fn drain(&self) {
        let c = self.inner.clone();
        let _ = self.rt.run(async move { c.drain().await });
    }

    /// Closes the client (see [`crate::Client::close`]).
    pub fn close(&self) {
        let c = self.inner.clone();
        let _ = self.rt.run(async move { c.close().await });
    }

    /// The async client underneath (its futures must run on a tokio runtime).
    pub fn as_async(&self) -> &crate::Client {
        &self.inner
    }
}

/// Cancels a [`Client::acquire_cancellable`] from any thread. Cheap to
/// clone; once cancelled it stays cancelled (a call started with it fails at
/// once).
#[derive(Clone, Default, Debug)]
pub struct CancelToken {
    inner: Arc<CancelInner>,
}

#[derive(Default, Debug)]
struct CancelInner {
    cancelled: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

impl CancelToken {
    /// A token not yet cancelled.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Cancels every call waiting with this token.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, std::sync::atomic::Ordering::SeqCst);
        self.inner.notify.notify_waiters();
    }

    /// Whether [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Runs `f` until it ends or this token is cancelled (then `f` is
    /// dropped: a queued acquire is withdrawn, crate::Client::acquire).
    async fn run<T>(&self, f: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
        let notified = self.inner.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.is_cancelled() {
            return Err(ErrorKind::Cancelled.into());
        }
        tokio::select! {
            r = f => r,
            _ = notified => Err(ErrorKind::Cancelled.into()),
        }
    }
}

/// A lease from the blocking client (see [`crate::Lease`]).
///
/// **Dropping it releases the lock before `drop` returns** (edge rule R10: a
/// guard that goes out of scope at the end of `main` frees the key for the
/// next run): the drop waits for the server's answer, at most the release
/// window (5 s) when the server does not answer. Call [`Lease::release`] to
/// learn the outcome, or [`Lease::detach`] to keep the lock past the guard.
/// In a forked child the drop does nothing (the lock is the parent's).
#[derive(Debug)]
#[must_use = "dropping a Lease releases it at once"]
pub struct Lease {
    inner: Option<crate::Lease>,
    rt: Arc<Runtime>,
    /// True once released, detached or dropped (ends [`Lease::expiring`]).
    done: watch::Sender<bool>,
}

impl Lease {
    fn l(&self) -> &crate::Lease {
        self.inner.as_ref().expect("lease")
    }

    /// See [`crate::Lease::key`].
    pub fn key(&self) -> &[u8] {
        self.l().key()
    }

    /// See [`crate::Lease::keys`].
    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.l().keys()
    }

    /// See [`crate::Lease::token`].
    pub fn token(&self) -> u64 {
        self.l().token()
    }

    /// See [`crate::Lease::deadline`].
    pub fn deadline(&self) -> Instant {
        self.l().deadline()
    }

    /// See [`crate::Lease::remaining`].
    pub fn remaining(&self) -> Duration {
        self.l().remaining()
    }

    /// See [`crate::Lease::release`].
    pub fn release(mut self) -> Result<(), Error> {
        let l = self.inner.take().expect("lease");
        if !self.rt.home() {
            let _ = l.detach(); // the parent's lock: never released from the child
            return Err(ErrorKind::Closed.into());
        }
        self.rt.run_home(async move { l.release().await })?
    }

    /// See [`crate::Lease::detach`]: stops managing the lease without
    /// releasing it and returns its token; dropping no longer releases it.
    pub fn detach(mut self) -> u64 {
        self.inner.take().expect("lease").detach()
    }

    /// Observes the lease's end (edge rule R12): the returned receiver gets
    /// one `()` at [`Lease::deadline`] minus `margin` (at once when that is
    /// past). It is disconnected, without a message, when the lease is
    /// released or dropped first, so `recv()` never blocks past the lease.
    ///
    /// ```no_run
    /// # fn demo(lease: &ticketing::blocking::Lease) {
    /// use std::time::Duration;
    /// let ending = lease.expiring(Duration::from_secs(2));
    /// while ending.try_recv().is_err() {
    ///     // ... one bounded unit of work with lease.token() ...
    /// #   break;
    /// }
    /// # }
    /// ```
    pub fn expiring(&self, margin: Duration) -> mpsc::Receiver<()> {
        let (tx, rx) = mpsc::sync_channel(1);
        let at = self.deadline().checked_sub(margin).unwrap_or(self.deadline());
        let mut done = self.done_rx();
        if self.rt.home() {
            self.rt.handle.spawn(async move {
                tokio::select! {
                    _ = tokio::time::sleep_until(at.into()) => { let _ = tx.send(()); }
                    _ = done.wait_for(|d| *d) => {}
                }
            });
        }
        rx
    }

    fn done_rx(&self) -> watch::Receiver<bool> {
        self.done.subscribe()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.done.send_replace(true);
        let Some(l) = self.inner.take() else {
            return;
        };
        if !self.rt.home() {
            let _ = l.detach();
            return;
        }
        // Synchronous, bounded by the release window (R10).
        let _ = self.rt.run_home(async move { l.release().await });
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Runtime")
    }
}
