use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{Client, RelState};
use crate::error::Error;

/// A granted lock: its key, fencing token and conservative local deadline.
///
/// Ownership lives in the token, not in a thread or task: a lease may be
/// moved to and released from any task or thread (and any process that knows
/// the key and token can release it with [`Client::release`]).
///
/// Release it with [`Lease::release`] to learn the outcome. Dropping a lease
/// without releasing it hands the release to the client's background task
/// (never blocking in `Drop`); it is retried for at most 5 s and the lease is
/// the final safety net.
#[must_use = "dropping a Lease releases it in the background at once"]
pub struct Lease {
    client: Client,
    /// The key, or the body of a key set (protocol.md §12.2).
    key: Arc<[u8]>,
    token: u64,
    deadline: Instant,
    released: bool,
    set: bool,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("keys", &self.keys().map(String::from_utf8_lossy).collect::<Vec<_>>())
            .field("token", &self.token)
            .field("remaining", &self.remaining())
            .finish()
    }
}

impl Lease {
    pub(crate) fn new(client: Client, key: Arc<[u8]>, token: u64, deadline: Instant, set: bool) -> Lease {
        Lease {
            client,
            key,
            token,
            deadline,
            released: false,
            set,
        }
    }

    /// The locked key (the first key of a key set).
    pub fn key(&self) -> &[u8] {
        self.keys().next().unwrap_or_default()
    }

    /// Every key this lease holds: one, or the keys of a set
    /// ([`Client::acquire_set`]) in the order given.
    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        let (one, set) = if self.set {
            (None, Some(crate::wire::set_keys(&self.key)))
        } else {
            (Some(&self.key[..]), None)
        };
        one.into_iter().chain(set.into_iter().flatten())
    }

    /// Whether this lease holds a key set.
    pub fn is_set(&self) -> bool {
        self.set
    }

    /// The fencing token of this grant (protocol.md §6): strictly greater
    /// than every token issued before it. Pass it to every resource the lock
    /// protects; the resource must reject a token lower than the highest it
    /// has seen, with the check and the write in one transaction.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The conservative local end of the lease: the local time just before
    /// the acquire was written, plus the time the server says it waited in
    /// the queue, plus the lease. Past it the lock may belong to someone else
    /// (keep a small margin: clocks run at slightly different rates).
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Time left until [`Lease::deadline`] (zero once past it).
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Resolves at [`Lease::deadline`] minus `margin` (edge rule R12): the
    /// lease is about to end; stop touching the protected resource. A future
    /// is Rust's cancellation primitive: `select!` it against the work. It
    /// never fails; after [`Lease::release`] the lease is gone (it was moved),
    /// so nothing can wait on a released lease.
    pub async fn expiring(&self, margin: Duration) {
        let at = self.deadline.checked_sub(margin).unwrap_or(self.deadline);
        tokio::time::sleep_until(at.into()).await
    }

    /// Stops managing the lease without releasing it and returns its token:
    /// dropping it no longer releases the lock. Release it later by key and
    /// token with [`Client::release`] (from any task or process), or let the
    /// lease end.
    pub fn detach(mut self) -> u64 {
        self.released = true;
        self.token
    }

    /// Releases the lock. `Ok` only when the server confirmed it (`O`);
    /// [`Error::NotHolder`] when the lease had already ended;
    /// [`Error::Indeterminate`] when no confirmation came within 5 s.
    /// Dropping this future before it ends continues the release in the
    /// background.
    pub async fn release(mut self) -> Result<(), Error> {
        self.released = true;
        let key = self.key.clone();
        self.client.release_arc(key, self.token, self.set).await
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.released {
            let inner = self.client.inner();
            inner.submit_release(self.key.clone(), self.token, RelState::new(inner.cfg.release_window, self.set));
        }
    }
}
