use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::config::{split_host_port, Config};
use crate::conn::{self, CallHandle, Conn, ConnErr, EnqErr, Owner, Reply, Req};
use crate::error::{Error, ErrorKind};
use crate::lease::Lease;
use crate::log;
use crate::wire::{self, Op, Status};

/// Consecutive `M` answers followed before backing off (protocol.md §7).
const MAX_MOVES: u32 = 3;
/// Addresses learned from `M` answers beyond those configured.
const MAX_EXTRA_ENDPOINTS: usize = 32;
/// Bound of the background release queue.
const RELEASE_QUEUE_LEN: usize = 4096;
const REDIRECT_BASE: Duration = Duration::from_millis(25);
const REDIRECT_CAP: Duration = Duration::from_millis(200);
/// How long past its wait a call may wait for a connection being opened for
/// the first time (edge rule R1).
const FIRST_CONNECT_GRACE: Duration = Duration::from_secs(1);

fn unsupported(op: Op) -> Error {
    let what = match op {
        Op::AcquireSet | Op::ReleaseSet => "key sets (protocol 1.1, S and X)",
        Op::Label => "connection labels (protocol 1.1)",
        _ => "this request",
    };
    ErrorKind::Unsupported(what.to_string()).into()
}

pub(crate) struct Endpoint {
    addr: String,
    conns: Vec<Arc<Conn>>,
}

struct Pool {
    eps: Vec<Arc<Endpoint>>,
    conns: Arc<[Arc<Conn>]>,
    extra: usize,
}

pub(crate) struct Inner {
    pub(crate) cfg: Config,
    closed: AtomicBool,
    close_tx: watch::Sender<bool>,
    pool: Mutex<Pool>,
    leader: Mutex<Option<Arc<Endpoint>>>,
    rr: AtomicUsize,
    /// A connection came up or failed, or an inflight slot was freed.
    pub(crate) changed: Notify,
    /// A request learned a leader other than the one known.
    new_leader: Notify,
    /// Background releases running.
    rel_count: AtomicUsize,
    /// Abandoned acquires still awaiting their answer.
    pub(crate) abandoned: AtomicUsize,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    handle: tokio::runtime::Handle,
    me: OnceLock<Weak<ClientRef>>,
    pid: u32,
    rng: AtomicU64,
}

/// A client of one Ticketing server or cluster: cheap to clone (all clones
/// share the connections), `Send + Sync`, one per process.
///
/// It keeps one persistent connection per address (two when given a single
/// address), each driven by a background task on the tokio runtime that
/// `connect` ran on, reconnecting with backoff (0.1 s doubling to 3.2 s)
/// forever: a dead socket never breaks the client. Requests are pipelined and
/// matched by req_id. The client closes when [`Client::close`] is called or
/// when the last clone (and the last [`Lease`]) is dropped.
///
/// ```no_run
/// # async fn demo() -> Result<(), ticketing::Error> {
/// use std::time::Duration;
/// let client = ticketing::Client::connect(ticketing::Config::builder().addr("127.0.0.1:7470").build()?).await?;
/// let lease = client.acquire("orders/42", Duration::from_secs(30), Duration::from_secs(5)).await?;
/// // Pass lease.token() to every resource the lock protects.
/// lease.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    r: Arc<ClientRef>,
}

pub(crate) struct ClientRef {
    inner: Arc<Inner>,
}

impl Drop for ClientRef {
    fn drop(&mut self) {
        self.inner.shutdown();
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("addrs", &self.r.inner.cfg.addrs).finish()
    }
}

impl Inner {
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    pub(crate) fn close_rx(&self) -> watch::Receiver<bool> {
        self.close_tx.subscribe()
    }

    fn shutdown(&self) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            self.close_tx.send_replace(true);
            self.changed.notify_waiters();
            self.new_leader.notify_waiters();
        }
    }

    fn client(&self) -> Option<Client> {
        self.me.get()?.upgrade().map(|r| Client { r })
    }

    fn rand(&self) -> u64 {
        // xorshift64*: jitter only.
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.store(x, Ordering::Relaxed);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Full jitter (edge rule R16): uniform in [0, step].
    fn jitter(&self, step: Duration) -> Duration {
        let span = step.as_nanos() as u64;
        if span == 0 {
            return step;
        }
        Duration::from_nanos(self.rand() % (span + 1))
    }

    /// The reconnect delay before attempt n ≥ 1: steps 0.1 s, 0.2 s, … 3.2 s,
    /// each delay drawn uniformly from [0, step] (full jitter, R16).
    pub(crate) fn backoff_delay(&self, n: u32) -> Duration {
        self.jitter(backoff_step(self.cfg.backoff_base, self.cfg.backoff_cap, n))
    }

    fn redirect_delay(&self, n: u32) -> Duration {
        self.jitter(backoff_step(self.cfg.backoff_base.min(REDIRECT_BASE), REDIRECT_CAP, n))
    }

    fn spawn_conn(self: &Arc<Self>, c: Arc<Conn>) {
        let h = self.handle.spawn(conn::run(self.clone(), c));
        self.tasks.lock().unwrap().push(h);
    }

    fn conns(&self) -> Arc<[Arc<Conn>]> {
        self.pool.lock().unwrap().conns.clone()
    }

    fn leader(&self) -> Option<Arc<Endpoint>> {
        self.leader.lock().unwrap().clone()
    }

    /// Queues on the known leader first, else round robin over all up connections.
    fn try_enqueue(&self, r: &Req<'_>) -> Result<CallHandle, EnqErr> {
        let n0 = self.rr.fetch_add(1, Ordering::Relaxed);
        let mut res = EnqErr::Down;
        if let Some(ep) = self.leader() {
            let n = ep.conns.len();
            for i in 0..n {
                match ep.conns[(n0 + i) % n].enqueue(r) {
                    Ok(h) => return Ok(h),
                    Err(EnqErr::Full) => res = EnqErr::Full,
                    Err(EnqErr::Unsupported) => return Err(EnqErr::Unsupported),
                    Err(EnqErr::Down) => {}
                }
            }
            // The leader is up but full, or still connecting for the first
            // time: wait for it rather than asking a follower (it would say M).
            if matches!(res, EnqErr::Full) || ep.conns.iter().any(|c| c.connecting()) {
                return Err(res);
            }
        }
        let conns = self.conns();
        let n = conns.len();
        for i in 0..n {
            match conns[(n0 + i) % n].enqueue(r) {
                Ok(h) => return Ok(h),
                Err(EnqErr::Full) => res = EnqErr::Full,
                // Every node of a cluster announces the same features (§12.1).
                Err(EnqErr::Unsupported) => return Err(EnqErr::Unsupported),
                Err(EnqErr::Down) => {}
            }
        }
        Err(res)
    }

    fn last_conn_err(&self) -> Option<ConnErr> {
        let mut last = None;
        for c in self.conns().iter() {
            if let Some(e) = &c.st.lock().unwrap().last_err {
                if matches!(e, ConnErr::Auth(..)) {
                    return Some(e.clone());
                }
                last = Some(e.clone());
            }
        }
        last
    }

    /// R4/R5: no connection is up and an attempt failed authentication or
    /// TLS: waiting longer will not help, the call fails now with that error.
    fn hard_failure(&self) -> Option<Error> {
        let mut hard = None;
        for c in self.conns().iter() {
            let st = c.st.lock().unwrap();
            if st.up {
                return None;
            }
            if let Some(e @ (ConnErr::Auth(..) | ConnErr::Tls(..))) = &st.last_err {
                hard = Some(e.into());
            }
        }
        hard
    }

    fn connect_err(&self) -> Error {
        match self.last_conn_err() {
            Some(e) => (&e).into(),
            None => ErrorKind::Connect(format!("no connection to {} yet", self.cfg.addrs.join(", "))).into(),
        }
    }

    /// Queues r, waiting for a connection (until give_up) or a free
    /// max_inflight slot (until slot_give_up; then `Ok(None)`).
    async fn send(&self, r: &Req<'_>, give_up: Instant, slot_give_up: Instant) -> Result<Option<CallHandle>, Error> {
        if self.is_closed() {
            return Err(ErrorKind::Closed.into());
        }
        match self.try_enqueue(r) {
            Ok(h) => return Ok(Some(h)),
            Err(EnqErr::Unsupported) => return Err(unsupported(r.op)),
            Err(_) => {}
        }
        let mut closed = self.close_rx();
        let mut req = *r;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if matches!(req.op, Op::Acquire | Op::AcquireSet) && req.counts {
                // The time spent waiting for a connection or a slot comes out
                // of the wait the request carries: wait bounds the whole call
                // (slot_give_up is the end of the acquire's wait budget).
                let rem = slot_give_up.saturating_duration_since(Instant::now()).as_millis();
                if rem < (req.arg as u32) as u128 {
                    req.arg = (req.arg >> 32) << 32 | rem as u64;
                }
            }
            let full = match self.try_enqueue(&req) {
                Ok(h) => return Ok(Some(h)),
                Err(EnqErr::Full) => true,
                Err(EnqErr::Down) => false,
                Err(EnqErr::Unsupported) => return Err(unsupported(req.op)),
            };
            if self.is_closed() {
                return Err(ErrorKind::Closed.into());
            }
            if !full {
                if let Some(e) = self.hard_failure() {
                    return Err(e);
                }
            }
            // R1: a connection opened for the first time (a leader just
            // learned from M, the second connection of one address) may be
            // waited for up to FIRST_CONNECT_GRACE past a shorter wait.
            let limit = if full {
                slot_give_up
            } else if self.conns().iter().any(|c| c.connecting()) {
                give_up + FIRST_CONNECT_GRACE
            } else {
                give_up
            };
            if Instant::now() >= limit {
                return if full { Ok(None) } else { Err(self.connect_err()) };
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(limit.into()) => {}
                _ = closed.wait_for(|c| *c) => {}
            }
        }
    }

    /// Remembers the leader named by an M answer; an empty address forgets it.
    fn follow(self: &Arc<Self>, addr: &[u8]) {
        let Ok(addr) = std::str::from_utf8(addr) else {
            *self.leader.lock().unwrap() = None;
            return;
        };
        if addr.is_empty() || split_host_port(addr).is_none() {
            *self.leader.lock().unwrap() = None;
            return;
        }
        let ep = {
            let mut p = self.pool.lock().unwrap();
            if let Some(ep) = p.eps.iter().find(|e| e.addr == addr) {
                ep.clone()
            } else {
                if self.is_closed() || p.extra >= MAX_EXTRA_ENDPOINTS {
                    drop(p);
                    *self.leader.lock().unwrap() = None;
                    return;
                }
                let ep = Arc::new(Endpoint {
                    addr: addr.to_string(),
                    conns: vec![Arc::new(Conn::new(addr.to_string(), Arc::<Inner>::downgrade(self)))],
                });
                p.eps.push(ep.clone());
                let mut conns: Vec<Arc<Conn>> = p.conns.to_vec();
                conns.extend(ep.conns.iter().cloned());
                p.conns = conns.into();
                p.extra += 1;
                log(format_args!("following the leader to a new address {addr}"));
                for c in &ep.conns {
                    self.spawn_conn(c.clone());
                }
                ep
            }
        };
        let mut l = self.leader.lock().unwrap();
        let news = !l.as_ref().is_some_and(|o| Arc::ptr_eq(o, &ep));
        *l = Some(ep);
        drop(l);
        if news {
            self.new_leader.notify_waiters();
        }
    }

    /// Waits d, but returns early once per call when a new leader is learned.
    async fn sleep_redirect(&self, d: Duration, woken: &mut bool) -> Result<(), Error> {
        let mut closed = self.close_rx();
        if *woken {
            tokio::select! {
                _ = tokio::time::sleep(d) => Ok(()),
                _ = closed.wait_for(|c| *c) => Err(ErrorKind::Closed.into()),
            }
        } else {
            tokio::select! {
                _ = tokio::time::sleep(d) => Ok(()),
                _ = self.new_leader.notified() => { *woken = true; Ok(()) }
                _ = closed.wait_for(|c| *c) => Err(ErrorKind::Closed.into()),
            }
        }
    }

    /// Releases in the background a grant whose acquire was abandoned.
    pub(crate) fn compensate(&self, key: Arc<[u8]>, token: u64, set: bool) {
        if !self.submit_release(key, token, RelState::new(self.cfg.release_window, set)) {
            log(format_args!(
                "release queue full or client closed: an abandoned grant stays held until its lease ends"
            ));
        }
    }

    /// Queues a background release; false when the queue is full or closed.
    pub(crate) fn submit_release(&self, key: Arc<[u8]>, token: u64, st: RelState) -> bool {
        if self.is_closed() || std::process::id() != self.pid {
            return false;
        }
        let Some(client) = self.client() else {
            return false;
        };
        if self.rel_count.fetch_add(1, Ordering::SeqCst) >= RELEASE_QUEUE_LEN {
            self.rel_count.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        self.handle.spawn(async move {
            let mut st = st;
            let inner = client.r.inner.clone();
            if let Err(e) = release_loop(&inner, &key, token, &mut st).await {
                log(format_args!(
                    "background release of {:?} failed: {e}",
                    String::from_utf8_lossy(&key)
                ));
            }
            inner.rel_count.fetch_sub(1, Ordering::SeqCst);
            drop(client);
        });
        true
    }
}

impl Owner for Inner {
    fn config(&self) -> &Config {
        &self.cfg
    }
    fn is_closed(&self) -> bool {
        Inner::is_closed(self)
    }
    fn close_rx(&self) -> watch::Receiver<bool> {
        Inner::close_rx(self)
    }
    fn backoff_delay(&self, n: u32) -> Duration {
        Inner::backoff_delay(self, n)
    }
    fn changed(&self) {
        self.changed.notify_waiters();
    }
    fn abandoned(&self, delta: i32) {
        if delta >= 0 {
            self.abandoned.fetch_add(delta as usize, Ordering::SeqCst);
        } else {
            self.abandoned.fetch_sub(delta.unsigned_abs() as usize, Ordering::SeqCst);
        }
    }
    /// The client's decision: release it in the background.
    fn unwanted_grant(&self, key: Arc<[u8]>, token: u64, set: bool) {
        self.compensate(key, token, set);
    }
}

/// The address an error names: the connection used, else every configured one.
fn where_(inner: &Inner, addr: &str) -> String {
    if addr.is_empty() {
        inner.cfg.addrs.join(", ")
    } else {
        addr.to_string()
    }
}

/// A set's keys for messages: `a,b,c`.
pub(crate) fn set_name(body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(body.len());
    for (i, k) in wire::set_keys(body).enumerate() {
        if i > 0 {
            v.push(b',');
        }
        v.extend_from_slice(k);
    }
    v
}

fn joined<K: AsRef<[u8]>>(keys: &[K]) -> Vec<u8> {
    keys.iter().map(|k| k.as_ref()).collect::<Vec<_>>().join(&b',')
}

/// R8: token 0 is refused before sending (the server never issues it).
fn check_token(token: u64) -> Result<(), Error> {
    if token == 0 {
        Err(Error::invalid("token must not be 0 (the server never issues it)"))
    } else {
        Ok(())
    }
}

/// Checks a key set (2..=16 distinct valid keys) and encodes its body.
fn set_body<K: AsRef<[u8]>>(keys: &[K]) -> Result<Arc<[u8]>, Error> {
    if keys.len() < wire::MIN_SET_KEYS || keys.len() > wire::MAX_SET_KEYS {
        return Err(Error::invalid(format!(
            "keys: a set has {}..{} keys (got {})",
            wire::MIN_SET_KEYS,
            wire::MAX_SET_KEYS,
            keys.len()
        )));
    }
    for (i, k) in keys.iter().enumerate() {
        check_key(k.as_ref())?;
        if keys[..i].iter().any(|o| o.as_ref() == k.as_ref()) {
            return Err(Error::invalid(format!(
                "keys: key {:?} appears twice in the set (key {} of {})",
                String::from_utf8_lossy(k.as_ref()),
                i + 1,
                keys.len()
            )));
        }
    }
    Ok(Arc::from(wire::set_body(keys)))
}

/// Per-call options of [`Client::acquire_with`].
#[derive(Clone, Debug, Default)]
pub struct AcquireOptions {
    min_remaining: Option<Duration>,
}

impl AcquireOptions {
    /// No options: as [`Client::acquire`].
    pub fn new() -> AcquireOptions {
        AcquireOptions::default()
    }

    /// The minimum working time (edge rule R14): when the conservative
    /// remaining lease right after the grant is below `d`, the client
    /// releases the lock at once and the acquire fails with
    /// [`ErrorKind::InsufficientLease`].
    pub fn min_remaining(mut self, d: Duration) -> AcquireOptions {
        self.min_remaining = Some(d);
        self
    }
}

fn backoff_step(base: Duration, cap: Duration, n: u32) -> Duration {
    let mut d = base;
    let mut i = 1;
    while i < n && d < cap {
        d *= 2;
        i += 1;
    }
    d.min(cap)
}

/// Converts to whole milliseconds, rounding up; `None` beyond u32.
fn millis(d: Duration) -> Option<u32> {
    let ms = d.as_nanos().div_ceil(1_000_000);
    u32::try_from(ms).ok()
}

pub(crate) fn check_key(key: &[u8]) -> Result<(), Error> {
    if wire::valid_key(key) {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "key must be 1..{} bytes of UTF-8 without control characters (got {} bytes{})",
            wire::MAX_KEY_LEN,
            key.len(),
            if std::str::from_utf8(key).is_err() { ", not UTF-8" } else { "" }
        )))
    }
}

/// The state of one release across its attempts.
#[derive(Clone, Debug)]
pub(crate) struct RelState {
    deadline: Instant,
    maybe: bool,
    moves: u32,
    retries: u32,
    woken: bool,
    /// A key set (`X`, the key is the set's body) rather than one key (`R`).
    set: bool,
    /// The address of the last attempt (for the error, R15).
    addr: String,
}

impl RelState {
    pub(crate) fn new(window: Duration, set: bool) -> RelState {
        RelState {
            deadline: Instant::now() + window,
            maybe: false,
            moves: 0,
            retries: 0,
            woken: false,
            set,
            addr: String::new(),
        }
    }
}

enum RelStep {
    Done(Result<(), Error>),
    Retry(Duration),
}

fn rel_outcome(inner: &Arc<Inner>, s: &mut RelState, r: Reply) -> RelStep {
    let a = match r {
        Reply::Unsent if inner.is_closed() => return RelStep::Done(Err(ErrorKind::Closed.into())),
        Reply::Lost if inner.is_closed() => return RelStep::Done(Err(ErrorKind::Indeterminate.into())),
        Reply::Unsent => return RelStep::Retry(Duration::ZERO),
        Reply::Lost => {
            s.maybe = true;
            s.retries += 1;
            return RelStep::Retry(inner.redirect_delay(s.retries));
        }
        Reply::Answer(a) => a,
    };
    match a.status {
        Status::Released => RelStep::Done(Ok(())),
        Status::NotHolder if s.maybe => RelStep::Done(Err(ErrorKind::Indeterminate.into())),
        Status::NotHolder => RelStep::Done(Err(ErrorKind::NotHolder.into())),
        Status::Moved => {
            inner.follow(&a.payload);
            s.moves += 1;
            if s.moves > MAX_MOVES {
                s.moves = 0;
                s.retries += 1;
                RelStep::Retry(inner.redirect_delay(s.retries))
            } else {
                RelStep::Retry(Duration::ZERO)
            }
        }
        Status::Unknown => {
            s.maybe = true;
            s.retries += 1;
            RelStep::Retry(inner.redirect_delay(s.retries))
        }
        _ => RelStep::Done(Err(server_error(&a))),
    }
}

fn server_error(a: &conn::Answer) -> Error {
    ErrorKind::Invalid(crate::error::Invalid {
        code: Some(a.code),
        message: String::from_utf8_lossy(&a.payload).into_owned(),
    })
    .into()
}

/// Releases key/token: retried until a definite answer or the state's
/// deadline (5 s after it was requested), never reported as success without O.
pub(crate) async fn release_loop(inner: &Arc<Inner>, key: &Arc<[u8]>, token: u64, s: &mut RelState) -> Result<(), Error> {
    loop {
        if inner.is_closed() {
            return Err(if s.maybe {
                ErrorKind::Indeterminate.into()
            } else {
                ErrorKind::Closed.into()
            });
        }
        let now = Instant::now();
        if now >= s.deadline {
            return Err(ErrorKind::Indeterminate.into());
        }
        let req = Req {
            op: if s.set { Op::ReleaseSet } else { Op::Release },
            key,
            arg: token,
            counts: false,
        };
        let mut h = match inner.send(&req, s.deadline, s.deadline).await {
            Ok(Some(h)) => h,
            Ok(None) => return Err(ErrorKind::Indeterminate.into()),
            Err(e) if *e.kind() == ErrorKind::Closed => {
                return Err(if s.maybe {
                    ErrorKind::Indeterminate.into()
                } else {
                    ErrorKind::Closed.into()
                })
            }
            // Nothing could be sent within the window: the lock may still be held.
            Err(e) if matches!(e.kind(), ErrorKind::Unsupported(_)) => return Err(e),
            Err(_) => return Err(ErrorKind::Indeterminate.into()),
        };
        s.addr.clear();
        s.addr.push_str(h.addr());
        let reply = tokio::select! {
            r = h.wait() => r,
            // The window is over and this attempt is unanswered: never wait longer
            // (dropping h leaves the attempt to the connection).
            _ = tokio::time::sleep_until(s.deadline.into()) => return Err(ErrorKind::Indeterminate.into()),
        };
        match rel_outcome(inner, s, reply) {
            RelStep::Done(r) => return r,
            RelStep::Retry(wait) => {
                let left = s.deadline.saturating_duration_since(Instant::now());
                let d = wait.min(left.saturating_sub(Duration::from_millis(10)));
                if !d.is_zero() {
                    let mut woken = s.woken;
                    let r = inner.sleep_redirect(d, &mut woken).await;
                    s.woken = woken;
                    if r.is_err() {
                        return Err(if s.maybe {
                            ErrorKind::Indeterminate.into()
                        } else {
                            ErrorKind::Closed.into()
                        });
                    }
                }
            }
        }
    }
}

/// An explicit release in progress; when its future is dropped before the
/// end, the release goes on in the background (within the same 5 s window).
pub(crate) struct ReleaseGuard {
    pub inner: Arc<Inner>,
    pub key: Arc<[u8]>,
    pub token: u64,
    pub st: RelState,
    pub done: bool,
}

impl ReleaseGuard {
    pub(crate) async fn run(mut self) -> Result<(), Error> {
        let inner = self.inner.clone();
        let key = self.key.clone();
        let r = release_loop(&inner, &key, self.token, &mut self.st).await;
        self.done = true;
        let (op, shown) = if self.st.set {
            ("release_set", set_name(&key))
        } else {
            ("release", key.to_vec())
        };
        r.map_err(|e| e.at(op, &shown, &where_(&inner, &self.st.addr)))
    }
}

impl Drop for ReleaseGuard {
    fn drop(&mut self) {
        if !self.done {
            let st = RelState {
                maybe: true,
                ..self.st.clone()
            };
            self.inner.submit_release(self.key.clone(), self.token, st);
        }
    }
}

impl Client {
    /// Connects to the servers of `cfg` and returns once a connection is up.
    /// Must be called within a tokio runtime (its background tasks run there).
    ///
    /// Errors: [`Error::Connect`] when no connection is up within the
    /// connect timeout, [`Error::Auth`] when every address rejected the
    /// credentials or failed to prove the token, [`Error::Tls`] when every
    /// address failed TLS, [`Error::Invalid`] outside a runtime.
    pub async fn connect(cfg: Config) -> Result<Client, Error> {
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::invalid("Client::connect must run inside a tokio runtime (or use ticketing::blocking)"))?;
        let mut seed = [0u8; 8];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut seed)
            .map_err(|_| Error::from(ErrorKind::Connect("no randomness".into())))?;
        let (close_tx, _) = watch::channel(false);
        let per = if cfg.addrs.len() == 1 { 2 } else { 1 };
        let timeout = cfg.connect_timeout;
        let inner = Arc::new_cyclic(|w: &Weak<Inner>| {
            let eps: Vec<Arc<Endpoint>> = cfg
                .addrs
                .iter()
                .map(|a| {
                    Arc::new(Endpoint {
                        addr: a.clone(),
                        conns: (0..per).map(|_| Arc::new(Conn::new(a.clone(), w.clone()))).collect(),
                    })
                })
                .collect();
            let conns: Vec<Arc<Conn>> = eps.iter().flat_map(|e| e.conns.iter().cloned()).collect();
            Inner {
                cfg,
                closed: AtomicBool::new(false),
                close_tx,
                pool: Mutex::new(Pool {
                    eps,
                    conns: conns.into(),
                    extra: 0,
                }),
                leader: Mutex::new(None),
                rr: AtomicUsize::new(0),
                changed: Notify::new(),
                new_leader: Notify::new(),
                rel_count: AtomicUsize::new(0),
                abandoned: AtomicUsize::new(0),
                tasks: Mutex::new(Vec::new()),
                handle,
                me: OnceLock::new(),
                pid: std::process::id(),
                rng: AtomicU64::new(u64::from_le_bytes(seed) | 1),
            }
        });
        let r = Arc::new(ClientRef { inner: inner.clone() });
        let _ = inner.me.set(Arc::downgrade(&r));
        let client = Client { r };
        for c in inner.conns().iter() {
            inner.spawn_conn(c.clone());
        }
        client.wait_first(Instant::now() + timeout).await?;
        Ok(client)
    }

    async fn wait_first(&self, deadline: Instant) -> Result<(), Error> {
        let inner = &self.r.inner;
        loop {
            let notified = inner.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let conns = inner.conns();
            let mut all_failed = true;
            let mut all_auth = true;
            let mut all_tls = true;
            let mut last = None;
            for c in conns.iter() {
                let st = c.st.lock().unwrap();
                if st.up {
                    return Ok(());
                }
                all_failed &= st.failures > 0;
                all_auth &= matches!(st.last_err, Some(ConnErr::Auth(..)));
                all_tls &= matches!(st.last_err, Some(ConnErr::Tls(..)));
                if st.last_err.is_some() {
                    last.clone_from(&st.last_err);
                }
            }
            if all_failed && (all_auth || all_tls) {
                self.r.inner.shutdown();
                return Err((&last.expect("failed")).into());
            }
            if Instant::now() >= deadline {
                let e = inner.connect_err();
                self.r.inner.shutdown();
                return Err(e);
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(deadline.into()) => {}
            }
        }
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.r.inner
    }

    fn check_pid(&self) -> Result<(), Error> {
        // A blocking call (blocking::block_on) checked the process already.
        if self.r.inner.is_closed() || (!crate::conn::DRIVEN.with(|d| d.get()) && std::process::id() != self.r.inner.pid) {
            // After fork() the inherited sockets belong to the parent.
            return Err(ErrorKind::Closed.into());
        }
        Ok(())
    }

    /// Waits up to `wait` for the lock on `key` and returns it with a lease
    /// of `lease`. Both are rounded up to whole milliseconds; `lease` must be
    /// at least 1 ms; `wait` zero means try once (see [`Client::try_acquire`]).
    ///
    /// Errors: [`ErrorKind::Timeout.into()`] (not acquired within wait), [`Error::Busy`]
    /// (refused at once, never retried), [`ErrorKind::Indeterminate.into()`] (the request
    /// was written but no definite answer came: the lock may have been
    /// granted — do not enter the critical section), [`Error::Connect`],
    /// [`ErrorKind::NoLeader.into()`], [`Error::Invalid`], [`ErrorKind::Closed.into()`].
    ///
    /// The request is retried internally only when it was never written or
    /// the answer was `M` (not executed), within the remaining wait.
    ///
    /// **Cancellation safe**: dropping the future while the acquire is queued
    /// withdraws it (`C`) on its connection, and a grant that won the race is
    /// released by the client in the background.
    pub async fn acquire(&self, key: impl AsRef<[u8]>, lease: Duration, wait: Duration) -> Result<Lease, Error> {
        self.acquire_with(key, lease, wait, &AcquireOptions::new()).await
    }

    /// [`Client::acquire`] with options, e.g. a minimum working time (edge
    /// rule R14):
    ///
    /// ```no_run
    /// # async fn demo(client: ticketing::Client) -> Result<(), ticketing::Error> {
    /// use std::time::Duration;
    /// use ticketing::AcquireOptions;
    /// let opts = AcquireOptions::new().min_remaining(Duration::from_secs(20));
    /// let lease = client.acquire_with("jobs/nightly", Duration::from_secs(30), Duration::from_secs(5), &opts).await?;
    /// # drop(lease); Ok(()) }
    /// ```
    pub async fn acquire_with(
        &self,
        key: impl AsRef<[u8]>,
        lease: Duration,
        wait: Duration,
        opts: &AcquireOptions,
    ) -> Result<Lease, Error> {
        let key: Arc<[u8]> = Arc::from(key.as_ref());
        let mut addr = String::new();
        let r = match check_key(&key) {
            Ok(()) => self.acquire_raw(Op::Acquire, &key, lease, wait, &mut addr).await,
            Err(e) => Err(e),
        };
        let r = r.and_then(|(token, deadline)| self.granted(Lease::new(self.clone(), key.clone(), token, deadline, false), opts));
        r.map_err(|e| e.at("acquire", &key, &where_(self.inner(), &addr)))
    }

    /// Acquires every key of `keys` at once (protocol 1.1 key sets,
    /// protocol.md §12.2): 2..=16 distinct keys, one lease, one wait and one
    /// fencing token for all of them; the returned lease covers every key
    /// ([`Lease::keys`]) and releases them together. The set queues on each
    /// key in FIFO order with single-key acquires, without deadlock.
    ///
    /// Errors as [`Client::acquire`], and [`ErrorKind::Unsupported`] when the
    /// server does not announce key sets (a 1.0 server).
    ///
    /// ```no_run
    /// # async fn demo(client: ticketing::Client) -> Result<(), ticketing::Error> {
    /// use std::time::Duration;
    /// let lease = client.acquire_set(&["acct/17", "acct/42"], Duration::from_secs(30), Duration::from_secs(5)).await?;
    /// // move money between both accounts, fenced with lease.token()
    /// lease.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire_set<K: AsRef<[u8]>>(&self, keys: &[K], lease: Duration, wait: Duration) -> Result<Lease, Error> {
        self.acquire_set_with(keys, lease, wait, &AcquireOptions::new()).await
    }

    /// [`Client::acquire_set`] with options.
    pub async fn acquire_set_with<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        lease: Duration,
        wait: Duration,
        opts: &AcquireOptions,
    ) -> Result<Lease, Error> {
        let mut addr = String::new();
        let r = match set_body(keys) {
            Ok(body) => match self.acquire_raw(Op::AcquireSet, &body, lease, wait, &mut addr).await {
                Ok((token, deadline)) => self.granted(Lease::new(self.clone(), body, token, deadline, true), opts),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        r.map_err(|e| e.at("acquire_set", &joined(keys), &where_(self.inner(), &addr)))
    }

    /// R14: a grant with less than the minimum working time left is
    /// released at once (dropping the lease) and refused.
    fn granted(&self, l: Lease, opts: &AcquireOptions) -> Result<Lease, Error> {
        if let Some(min) = opts.min_remaining {
            let left = l.remaining();
            if left < min {
                drop(l);
                return Err(ErrorKind::InsufficientLease(left).into());
            }
        }
        Ok(l)
    }

    /// The acquire loop of `A` and `S` (`key` is the set's body for `S`):
    /// the token and the conservative deadline; `addr` is the connection used.
    async fn acquire_raw(
        &self,
        op: Op,
        key: &Arc<[u8]>,
        lease: Duration,
        wait: Duration,
        addr: &mut String,
    ) -> Result<(u64, Instant), Error> {
        self.check_pid()?;
        let lease_ms = match millis(lease) {
            Some(ms) if ms > 0 => ms,
            _ => return Err(Error::invalid(format!("lease {} ms must be 1..{} ms", lease.as_millis(), u32::MAX))),
        };
        let mut wait_ms = millis(wait).ok_or_else(|| Error::invalid(format!("wait {} ms must be 0..{} ms", wait.as_millis(), u32::MAX)))?;
        let inner = self.inner();
        let start = Instant::now();
        let budget_end = start + Duration::from_millis(wait_ms as u64);
        let (mut moves, mut rounds, mut woken) = (0u32, 0u32, false);
        loop {
            let req = Req {
                op,
                key,
                arg: (lease_ms as u64) << 32 | wait_ms as u64,
                counts: wait_ms > 0,
            };
            // R1: the wait bounds the whole call, waiting for a connection included.
            let Some(mut h) = inner.send(&req, budget_end, budget_end).await? else {
                return Err(ErrorKind::Timeout.into()); // no free max_inflight slot within the wait
            };
            addr.clear();
            addr.push_str(h.addr());
            // R2: a written acquire is answered within its wait (T at the
            // latest); past wait + the answer allowance, counted from the
            // write, the server is silent: give up Indeterminate. Dropping h
            // withdraws it (C) and compensates a grant that arrives later.
            let answer_by = h.sent + Duration::from_millis(wait_ms as u64) + inner.cfg.answer_allowance;
            let reply = match tokio::time::timeout_at(answer_by.into(), h.wait()).await {
                Ok(r) => r,
                Err(_) => {
                    drop(h);
                    log(format_args!(
                        "acquire of {:?}: no answer within its wait + {:?}: indeterminate",
                        String::from_utf8_lossy(key),
                        inner.cfg.answer_allowance
                    ));
                    return Err(ErrorKind::Indeterminate.into());
                }
            };
            let sent = h.sent;
            drop(h);
            match reply {
                Reply::Lost if inner.is_closed() => return Err(ErrorKind::Closed.into()),
                Reply::Lost => return Err(ErrorKind::Indeterminate.into()),
                Reply::Unsent if inner.is_closed() => return Err(ErrorKind::Closed.into()),
                Reply::Unsent => {} // never written: retry, on another connection if need be
                Reply::Answer(a) => match a.status {
                    Status::Granted => {
                        let deadline = sent + wire::queued_duration(a.queued) + Duration::from_millis(lease_ms as u64);
                        return Ok((a.value, deadline));
                    }
                    Status::Timeout => return Err(ErrorKind::Timeout.into()),
                    Status::Busy => return Err(ErrorKind::Busy(a.code).into()),
                    Status::Unknown => return Err(ErrorKind::Indeterminate.into()),
                    Status::Moved => {
                        inner.follow(&a.payload);
                        moves += 1;
                        if moves > MAX_MOVES {
                            rounds += 1;
                            let d = inner.redirect_delay(rounds);
                            if wait_ms == 0 || budget_end.saturating_duration_since(Instant::now()) <= d {
                                return Err(ErrorKind::NoLeader.into());
                            }
                            inner.sleep_redirect(d, &mut woken).await?;
                            moves = 0;
                        }
                    }
                    _ => return Err(server_error(&a)),
                },
            }
            // Retry with the remaining wait (protocol.md §7).
            if wait_ms > 0 {
                let rem = budget_end.saturating_duration_since(Instant::now());
                if rem < Duration::from_millis(1) {
                    return Err(ErrorKind::Timeout.into());
                }
                wait_ms = rem.as_millis() as u32;
            }
        }
    }

    /// [`Client::acquire`] with wait 0: one attempt, answered at once;
    /// `Ok(None)` when the key is held.
    pub async fn try_acquire(&self, key: impl AsRef<[u8]>, lease: Duration) -> Result<Option<Lease>, Error> {
        match self.acquire(key, lease, Duration::ZERO).await {
            Ok(l) => Ok(Some(l)),
            Err(e) if *e.kind() == ErrorKind::Timeout => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// [`Client::acquire`] with a wait whose timeout is a value (edge rule
    /// R13): `Ok(None)` when the lock was not acquired within `wait`; every
    /// other failure is an error as for `acquire`.
    pub async fn try_acquire_for(&self, key: impl AsRef<[u8]>, lease: Duration, wait: Duration) -> Result<Option<Lease>, Error> {
        match self.acquire(key, lease, wait).await {
            Ok(l) => Ok(Some(l)),
            Err(e) if *e.kind() == ErrorKind::Timeout => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Releases the lock on `key` held with `token`, from any process that
    /// knows the token. `Ok` only when the server answered `O`;
    /// [`ErrorKind::NotHolder.into()`] when the key is free or held under another token;
    /// [`ErrorKind::Indeterminate.into()`] when no confirmation came within 5 s.
    /// Dropping the future hands the release to the background (same window).
    pub async fn release(&self, key: impl AsRef<[u8]>, token: u64) -> Result<(), Error> {
        let key: Arc<[u8]> = Arc::from(key.as_ref());
        let pre = self.check_pid().and_then(|_| check_key(&key)).and_then(|_| check_token(token));
        if let Err(e) = pre {
            return Err(e.at("release", &key, &where_(self.inner(), "")));
        }
        self.release_arc(key, token, false).await
    }

    /// Releases the key set `keys` held with `token` (protocol.md §12.2:
    /// `X`): `Ok` when the server answered `O`; [`ErrorKind::NotHolder`]
    /// when the token does not hold exactly these keys (in any order), the
    /// set was released or its lease ended.
    pub async fn release_set<K: AsRef<[u8]>>(&self, keys: &[K], token: u64) -> Result<(), Error> {
        let pre = self.check_pid().and_then(|_| check_token(token)).and_then(|_| set_body(keys));
        match pre {
            Ok(body) => self.release_arc(body, token, true).await,
            Err(e) => Err(e.at("release_set", &joined(keys), &where_(self.inner(), ""))),
        }
    }

    pub(crate) async fn release_arc(&self, key: Arc<[u8]>, token: u64, set: bool) -> Result<(), Error> {
        let inner = self.inner().clone();
        let st = RelState::new(inner.cfg.release_window, set);
        ReleaseGuard {
            inner,
            key,
            token,
            st,
            done: false,
        }
        .run()
        .await
    }

    /// Runs `f` holding the lock, then releases it (also when `f` returns an
    /// error value) and returns `f`'s result. The release is awaited; its
    /// failure is not reported over `f`'s result (the lease is the safety net).
    ///
    /// ```no_run
    /// # async fn demo(client: ticketing::Client) -> Result<(), ticketing::Error> {
    /// use std::time::Duration;
    /// let n = client
    ///     .with_lock("jobs/nightly", Duration::from_secs(60), Duration::from_secs(1), async |lease| {
    ///         // write with fencing token lease.token()
    ///         lease.token()
    ///     })
    ///     .await?;
    /// # let _ = n; Ok(()) }
    /// ```
    pub async fn with_lock<T, F>(&self, key: impl AsRef<[u8]>, lease: Duration, wait: Duration, f: F) -> Result<T, Error>
    where
        F: AsyncFnOnce(&Lease) -> T,
    {
        let l = self.acquire(key, lease, wait).await?;
        let out = f(&l).await;
        let _ = l.release().await;
        Ok(out)
    }

    /// Waits until no background work is left: no withdrawn acquire still
    /// awaiting its answer and no release retried in the background. Call it
    /// before `close` in a short-lived process, and at the end of `main` after
    /// dropping leases (edge rule R10). Returns within the release window plus
    /// the answer allowance (8 s by default).
    pub async fn drain(&self) {
        let inner = self.inner();
        // Bounded: a release is retried within its window; a withdrawn acquire
        // against a silent server may never be answered.
        let give_up = Instant::now() + inner.cfg.release_window + inner.cfg.answer_allowance;
        while inner.rel_count.load(Ordering::SeqCst) > 0 || inner.abandoned.load(Ordering::SeqCst) > 0 {
            if inner.is_closed() || Instant::now() >= give_up {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Closes every connection and stops the background tasks. Operations in
    /// progress fail with [`ErrorKind::Closed.into()`]; background releases are
    /// abandoned (those locks end with their leases). Idempotent.
    pub async fn close(&self) {
        let inner = self.inner();
        inner.shutdown();
        let tasks: Vec<_> = std::mem::take(&mut *inner.tasks.lock().unwrap());
        for t in tasks {
            let _ = t.await;
        }
    }

    /// Whether [`Client::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.inner().is_closed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_schedule() {
        let b = Duration::from_millis(100);
        let c = Duration::from_millis(3200);
        let got: Vec<u128> = (1..=8).map(|n| backoff_step(b, c, n).as_millis()).collect();
        assert_eq!(got, [100, 200, 400, 800, 1600, 3200, 3200, 3200]);
    }

    #[test]
    fn millis_rounds_up_and_bounds() {
        assert_eq!(millis(Duration::from_micros(1)), Some(1));
        assert_eq!(millis(Duration::from_millis(5)), Some(5));
        assert_eq!(millis(Duration::from_millis(u32::MAX as u64)), Some(u32::MAX));
        assert_eq!(millis(Duration::from_millis(u32::MAX as u64 + 1)), None);
    }
}
