//! One persistent connection per address, kept by one background driver task.
//!
//! Senders encode their frame straight into the connection's write buffer
//! under its mutex and register a pending entry under a fresh req_id; the
//! driver task writes whole batches and reads responses concurrently (one
//! `select!` over a read loop and a write loop). The batch counter `taken`
//! tells which frames may have reached the socket: a request whose frame
//! number is below it was "written" (its loss is indeterminate), any other
//! was "unsent" (safe to retry). Completions (an answer put in the caller's
//! [`Slot`]) happen under the mutex, so a caller that drops its future sees
//! either its entry still pending (and withdraws it) or its answer already in
//! its slot; the callers' wakers are woken after the mutex is unlocked (a
//! woken caller never finds the connection locked by the thread that woke it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{watch, Notify};

use crate::config::Config;
use crate::error::{Error, ErrorKind};
use crate::wire::{self, Code, Op, Status};

/// What a connection needs from its owner and reports to it. The connection
/// imports nothing of the client (issue 33 finding 3): it reports events
/// (came up, failed, lost, a slot freed, an abandoned acquire settled, a grant
/// nobody waits for) and the client decides what to do with them.
pub(crate) trait Owner: Send + Sync + 'static {
    /// The configuration: token, role, TLS, connect timeout.
    fn config(&self) -> &Config;
    fn is_closed(&self) -> bool;
    fn close_rx(&self) -> watch::Receiver<bool>;
    /// The delay before reconnect attempt n ≥ 1.
    fn backoff_delay(&self, n: u32) -> Duration;
    /// A connection came up or failed, or an inflight slot was freed.
    fn changed(&self);
    /// An acquire whose caller gave up is in flight (+1), or settled (-1).
    fn abandoned(&self, delta: i32);
    /// A grant arrived for an acquire whose caller gave up (`set`: a key
    /// set, `key` its body).
    fn unwanted_grant(&self, key: Arc<[u8]>, token: u64, set: bool);
}

const READ_BUF: usize = 64 << 10;
/// Unsent bytes per connection above which new requests go elsewhere or wait.
pub(crate) const MAX_WRITE_BUFFER: usize = 4 << 20;

pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// The underlying error of a failure (an I/O or TLS error): `Error::source`.
pub(crate) type Src = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Why a connection attempt failed.
#[derive(Clone, Debug)]
pub(crate) enum ConnErr {
    /// The REJECT code (AUTH_FAILED, BAD_HANDSHAKE), or None when the server failed its proof.
    Auth(Option<Code>, String),
    /// TLS failed, the server requires TLS, or it does not speak TLS: a
    /// configuration error (edge rule R5).
    Tls(String, Option<Src>),
    /// REJECT OVERLOADED or SHUTTING_DOWN.
    Busy(Code),
    Other(String, Option<Src>),
}

impl ConnErr {
    pub(crate) fn other(m: impl Into<String>) -> ConnErr {
        ConnErr::Other(m.into(), None)
    }
    pub(crate) fn io(m: impl Into<String>, e: std::io::Error) -> ConnErr {
        ConnErr::Other(m.into(), Some(Arc::new(e)))
    }
}

impl std::fmt::Display for ConnErr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnErr::Auth(_, m) | ConnErr::Tls(m, _) | ConnErr::Other(m, _) => f.write_str(m),
            ConnErr::Busy(c) => write!(f, "handshake rejected ({c})"),
        }
    }
}

/// An answer, or why there is none.
#[derive(Debug)]
pub(crate) enum Reply {
    Answer(Answer),
    /// Never handed to the socket: definitely not executed.
    Unsent,
    /// Handed to the socket, no answer: maybe executed.
    Lost,
}

#[derive(Debug)]
pub(crate) struct Answer {
    pub status: Status,
    pub code: Code,
    pub queued: u16,
    pub value: u64,
    pub payload: Vec<u8>,
    /// Delivered with a write token (State::tokens): its receiver settles it.
    tok: bool,
}

/// Where one call's answer lands (issue 33 finding 4: no channel per call).
/// Filled under the connection's mutex; the waker taken with the fill is
/// woken once that mutex is unlocked.
pub(crate) struct Slot {
    st: Mutex<SlotState>,
}

struct SlotState {
    reply: Option<Reply>,
    waker: Option<Waker>,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            st: Mutex::new(SlotState { reply: None, waker: None }),
        }
    }

    /// A slot for a new call: this thread's own when no call holds it any
    /// more (a blocking caller makes one call at a time: no allocation per
    /// call), else a new one.
    fn get() -> Arc<Slot> {
        thread_local! {
            static MINE: std::cell::RefCell<Arc<Slot>> = std::cell::RefCell::new(Arc::new(Slot::new()));
        }
        MINE.with(|m| {
            let mut m = m.borrow_mut();
            match Arc::get_mut(&mut m) {
                Some(s) => {
                    let st = s.st.get_mut().unwrap_or_else(|e| e.into_inner());
                    st.reply = None;
                    st.waker = None;
                }
                None => *m = Arc::new(Slot::new()),
            }
            m.clone()
        })
    }

    /// Puts the answer in; returns the waker to wake once the connection is unlocked.
    fn fill(&self, r: Reply) -> Option<Waker> {
        let mut st = self.st.lock().unwrap();
        st.reply = Some(r);
        st.waker.take()
    }

    fn take(&self) -> Option<Reply> {
        self.st.lock().unwrap().reply.take()
    }

    fn poll(&self, cx: &mut Context<'_>) -> Poll<Reply> {
        let mut st = self.st.lock().unwrap();
        if let Some(r) = st.reply.take() {
            return Poll::Ready(r);
        }
        match &st.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => st.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

enum Waiter {
    Caller(Arc<Slot>),
    /// The caller gave up on an acquire: compensate a grant (key kept here;
    /// the body of a set when the op is `S`).
    Abandoned(Arc<[u8]>),
    /// Nobody waits and nothing is to be done.
    Dropped,
}

struct Pending {
    op: Op,
    seq: u64,
    counts: bool,
    waiter: Waiter,
    /// Sent by a caller thread that drives its own call to the end
    /// (blocking::block_on, DRIVEN): its answer may carry a write token.
    driven: bool,
}

thread_local! {
    /// True while this thread polls a blocking call (blocking::block_on):
    /// such a caller runs until its call ends, so a write token handed to it
    /// is settled at once (a future polled by other code might never be
    /// polled again and would hold the other callers' frames back).
    pub(crate) static DRIVEN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The connection of this thread's blocking call in progress, when its
    /// reads may be shared (set by Conn::enqueue, used by help_read).
    static HELP: std::cell::RefCell<Option<Arc<Conn>>> = const { std::cell::RefCell::new(None) };
}

/// A blocking caller waiting for its answer (blocking::block_on): when the
/// read side of its connection is free, reads what the socket has
/// (non-blocking) and dispatches it to every caller it answers — its own
/// answer then needs no other thread (issue 33 finding 4). True when it read
/// something.
pub(crate) fn help_read() -> bool {
    HELP.with(|h| h.borrow().as_ref().is_some_and(|c| c.help_read()))
}

/// Forgets this thread's connection (its blocking call ended).
pub(crate) fn help_done() {
    HELP.with(|h| h.borrow_mut().take());
}

/// Who writes the queued frames now (at most one at a time).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Writer {
    None,
    /// The driver task (TLS, the socket buffer was full, or a caller handed over).
    Driver,
    /// A calling thread, in a non-blocking send on `direct` (conn.rs `flush_caller`).
    Caller,
}

/// Rounds a calling thread writes (its own frames and those queued
/// meanwhile) before it hands the rest to the driver task.
const MAX_CALLER_ROUNDS: u32 = 4;

pub(crate) struct State {
    pub up: bool,
    epoch: u64,
    pub ever_up: bool,
    pub failures: u32,
    pub last_err: Option<ConnErr>,
    /// The feature bits of the server of this connection (protocol.md §12.1).
    features: u16,
    max_inflight: usize,
    inflight: usize,
    pending: HashMap<u32, Pending>,
    next_id: u32,
    wbuf: Vec<u8>,
    seq: u64,
    taken: u64,
    writer: Writer,
    /// The plain TCP socket while its driver serves it and the client lets
    /// callers write (Config::direct_writes); None for TLS and when down.
    direct: Option<Fd>,
    /// A buffer kept for a caller's next write round.
    spare: Vec<u8>,
    /// Answers handed to callers that have not run since (each settles its
    /// own, Conn::settle): while any is out, a new frame waits for the last
    /// of them to run and write them all in one send (a burst of answers
    /// becomes one write, not one per caller).
    tokens: usize,
}

/// A duplicate of a connection's plain TCP socket, for callers' writes.
type Fd = Arc<std::net::TcpStream>;

pub(crate) struct Conn {
    pub addr: String,
    pub st: Mutex<State>,
    kick: Notify,
    inner: Weak<dyn Owner>,
    /// The read side of a plain TCP connection served with direct writes:
    /// the driver task reads into it, and so does a blocking caller waiting
    /// for its answer that finds it free ([`Conn::help_read`]). Locked
    /// before `st`, never after.
    rd: Mutex<ReadSide>,
    /// Wakes the driver's read loop when a caller's read ended the stream.
    rd_kick: Notify,
}

/// Bytes read and not yet dispatched, and the wakers to wake after a dispatch.
struct ReadSide {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    wake: Vec<Waker>,
    /// The connection these bytes are from.
    epoch: u64,
    /// The socket callers may read (None: TLS, down, or callers do not read).
    fd: Option<Fd>,
    /// Why a caller's read ended the stream, for the driver to report.
    failed: Option<String>,
}

impl ReadSide {
    fn new(epoch: u64, fd: Option<Fd>) -> ReadSide {
        ReadSide {
            buf: vec![0u8; READ_BUF],
            start: 0,
            end: 0,
            wake: Vec::new(),
            epoch,
            fd,
            failed: None,
        }
    }

    /// Where the next read goes (never empty).
    fn space(&mut self) -> &mut [u8] {
        &mut self.buf[self.end..]
    }

    /// `n` bytes were read into `space()`: dispatches every complete
    /// response and keeps room for the next one.
    fn consume(&mut self, conn: &Conn, inner: &dyn Owner, n: usize) -> Result<(), String> {
        self.end += n;
        match conn.dispatch(inner, self.epoch, &self.buf[self.start..self.end], &mut self.wake) {
            Ok(used) => self.start += used,
            Err(e) => return Err(format!("protocol violation by the server: {e}")),
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            if self.buf.len() > 4 * READ_BUF {
                self.buf = vec![0u8; READ_BUF];
            }
        } else {
            let need = wire::response_frame_len(&self.buf[self.start..self.end]);
            if need > self.buf.len() {
                let mut nb = vec![0u8; need];
                nb[..self.end - self.start].copy_from_slice(&self.buf[self.start..self.end]);
                self.buf = nb;
                self.end -= self.start;
                self.start = 0;
            } else if self.start + need > self.buf.len() || self.end == self.buf.len() {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
        }
        Ok(())
    }
}

/// A request to queue.
#[derive(Clone, Copy)]
pub(crate) struct Req<'a> {
    pub op: Op,
    pub key: &'a Arc<[u8]>,
    pub arg: u64,
    pub counts: bool,
}

pub(crate) enum EnqErr {
    Down,
    Full,
    /// Up, but the server does not announce the feature the op needs.
    Unsupported,
}

/// A request in flight; dropping it before its answer withdraws it.
pub(crate) struct CallHandle {
    conn: Arc<Conn>,
    epoch: u64,
    id: u32,
    op: Op,
    counts: bool,
    key: Arc<[u8]>,
    slot: Arc<Slot>,
    pub sent: Instant,
    armed: bool,
}

impl CallHandle {
    /// The address of the connection the request went to.
    pub fn addr(&self) -> &str {
        &self.conn.addr
    }

    pub async fn wait(&mut self) -> Reply {
        let r = std::future::poll_fn(|cx| self.slot.poll(cx)).await;
        self.armed = false;
        if let Reply::Answer(a) = &r {
            if a.tok {
                self.conn.settle(self.epoch);
            }
        }
        r
    }
}

impl Drop for CallHandle {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut comp = None;
        {
            let mut st = self.conn.st.lock().unwrap();
            let mine = st.epoch == self.epoch && st.pending.contains_key(&self.id);
            if mine {
                let p = st.pending.get_mut(&self.id).expect("pending");
                if matches!(self.op, Op::Acquire | Op::AcquireSet) {
                    p.waiter = Waiter::Abandoned(self.key.clone());
                    if let Some(inner) = self.conn.inner.upgrade() {
                        inner.abandoned(1);
                    }
                    if self.counts {
                        // Withdraw the queued acquire (protocol.md §5 "Cancel").
                        // A set is withdrawn by its first key (§12.2).
                        let arg = (self.id as u64) << 32;
                        let key: &[u8] = if self.op == Op::AcquireSet {
                            wire::set_keys(&self.key).next().unwrap_or_default()
                        } else {
                            &self.key
                        };
                        self.conn.enqueue_locked(&mut st, Op::Cancel, key, arg, false, Waiter::Dropped);
                        self.conn.push_locked(st);
                        return;
                    }
                } else {
                    p.waiter = Waiter::Dropped;
                }
            } else if let Some(Reply::Answer(a)) = self.slot.take() {
                // Answered before the caller gave up: the answer is ours to handle.
                if matches!(self.op, Op::Acquire | Op::AcquireSet) && a.status == Status::Granted {
                    comp = Some(a.value);
                }
                if a.tok && st.epoch == self.epoch && st.tokens > 0 {
                    st.tokens -= 1;
                    if st.tokens == 0 {
                        self.conn.push_locked(st);
                        if let (Some(token), Some(inner)) = (comp, self.conn.inner.upgrade()) {
                            inner.unwanted_grant(self.key.clone(), token, self.op == Op::AcquireSet);
                        }
                        return;
                    }
                }
            }
        }
        self.conn.kick.notify_one();
        if let (Some(token), Some(inner)) = (comp, self.conn.inner.upgrade()) {
            inner.unwanted_grant(self.key.clone(), token, self.op == Op::AcquireSet);
        }
    }
}

impl Conn {
    pub fn new(addr: String, inner: Weak<dyn Owner>) -> Conn {
        Conn {
            addr,
            st: Mutex::new(State {
                up: false,
                epoch: 0,
                ever_up: false,
                failures: 0,
                last_err: None,
                features: 0,
                max_inflight: 1,
                inflight: 0,
                pending: HashMap::new(),
                next_id: 0,
                wbuf: Vec::new(),
                seq: 0,
                taken: 0,
                writer: Writer::None,
                direct: None,
                spare: Vec::new(),
                tokens: 0,
            }),
            kick: Notify::new(),
            inner,
            rd: Mutex::new(ReadSide::new(0, None)),
            rd_kick: Notify::new(),
        }
    }

    /// Queues a request under a fresh req_id.
    pub fn enqueue(self: &Arc<Self>, r: &Req<'_>) -> Result<CallHandle, EnqErr> {
        let slot = Slot::get();
        let (epoch, id, sent);
        {
            let mut st = self.st.lock().unwrap();
            if !st.up || st.wbuf.len() > MAX_WRITE_BUFFER {
                return Err(EnqErr::Down);
            }
            if matches!(r.op, Op::AcquireSet | Op::ReleaseSet) && st.features & wire::FEATURE_KEY_SETS == 0 {
                return Err(EnqErr::Unsupported);
            }
            if r.counts && st.inflight >= st.max_inflight {
                return Err(EnqErr::Full);
            }
            sent = Instant::now(); // t_send (protocol.md §5): before the frame can be written
            id = self.enqueue_locked(&mut st, r.op, r.key, r.arg, r.counts, Waiter::Caller(slot.clone()));
            epoch = st.epoch;
            if st.direct.is_some() && DRIVEN.with(|d| d.get()) {
                HELP.with(|h| {
                    let mut h = h.borrow_mut();
                    if !h.as_ref().is_some_and(|c| Arc::ptr_eq(c, self)) {
                        *h = Some(self.clone());
                    }
                });
            }
            self.push_locked(st);
        }
        Ok(CallHandle {
            conn: self.clone(),
            epoch,
            id,
            op: r.op,
            counts: r.counts,
            key: r.key.clone(),
            slot,
            sent,
            armed: true,
        })
    }

    /// Gets the queued frames written and unlocks: this thread writes them
    /// itself when the connection allows it and nobody else is writing;
    /// else the writer in progress takes them in its next round, or the
    /// driver task is kicked.
    fn push_locked<'a>(&'a self, mut st: std::sync::MutexGuard<'a, State>) {
        match st.writer {
            Writer::Caller | Writer::Driver => {} // takes the new frames in its next round
            // A caller given its answer runs soon: the last of them writes.
            Writer::None if st.direct.is_some() && st.tokens > 0 => {}
            Writer::None if st.direct.is_some() => {
                st.writer = Writer::Caller;
                self.flush_caller(st);
            }
            Writer::None => {
                drop(st);
                self.kick.notify_one();
            }
        }
    }

    /// See [`help_read`].
    fn help_read(&self) -> bool {
        use std::io::Read;
        let Ok(mut rs) = self.rd.try_lock() else {
            return false; // another thread reads
        };
        if rs.failed.is_some() {
            return false;
        }
        let Some(fd) = rs.fd.take() else {
            return false;
        };
        let Some(inner) = self.inner.upgrade() else {
            rs.fd = Some(fd);
            return false;
        };
        let r = loop {
            match (&*fd).read(rs.space()) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                r => break r,
            }
        };
        rs.fd = Some(fd);
        let failed = match r {
            Ok(0) => Some("connection closed by the server".to_string()),
            Ok(n) => match rs.consume(self, &*inner, n) {
                Ok(()) => return true,
                Err(e) => Some(e),
            },
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) => Some(format!("read: {e}")),
        };
        // The driver takes the connection down with this cause.
        rs.failed = failed;
        drop(rs);
        self.rd_kick.notify_one();
        false
    }

    /// A caller that got an answer with a token runs again: the last one
    /// writes the frames queued meanwhile.
    fn settle(&self, epoch: u64) {
        let mut st = self.st.lock().unwrap();
        if st.epoch != epoch || st.tokens == 0 {
            return;
        }
        st.tokens -= 1;
        if st.tokens == 0 && !st.wbuf.is_empty() {
            self.push_locked(st);
        }
    }

    /// st.writer == Caller: writes every queued frame (its own and those
    /// appended meanwhile) with one non-blocking send per round; what the
    /// socket does not take at once, or more than MAX_CALLER_ROUNDS rounds,
    /// goes to the driver task.
    fn flush_caller<'a>(&'a self, mut st: std::sync::MutexGuard<'a, State>) {
        for _ in 0..MAX_CALLER_ROUNDS {
            let Some(fd) = st.direct.clone().filter(|_| st.up && !st.wbuf.is_empty()) else {
                st.writer = Writer::None;
                return;
            };
            st.taken = st.seq;
            let epoch = st.epoch;
            let spare = std::mem::take(&mut st.spare);
            let mut buf = std::mem::replace(&mut st.wbuf, spare);
            drop(st);
            let r = send_nonblocking(&fd, &buf);
            st = self.st.lock().unwrap();
            if st.epoch != epoch {
                // The connection went down meanwhile (its frames are settled
                // as lost or unsent) and its writer state was reset.
                return;
            }
            match r {
                Ok(n) if n == buf.len() => {
                    buf.clear();
                    if buf.capacity() <= 64 << 10 {
                        st.spare = buf;
                    }
                }
                Ok(n) => {
                    // The socket buffer is full: the rest goes first, by the driver.
                    let mut rest = buf.split_off(n);
                    rest.extend_from_slice(&st.wbuf);
                    st.wbuf = rest;
                    break;
                }
                Err(_) => {
                    // The driver's read sees the shut socket and takes the connection down.
                    let _ = fd.shutdown(std::net::Shutdown::Both);
                    st.writer = Writer::None;
                    return;
                }
            }
        }
        st.writer = Writer::None;
        let more = !st.wbuf.is_empty();
        drop(st);
        if more {
            self.kick.notify_one();
        }
    }

    fn enqueue_locked(&self, st: &mut State, op: Op, key: &[u8], arg: u64, counts: bool, waiter: Waiter) -> u32 {
        let id = loop {
            st.next_id = st.next_id.wrapping_add(1);
            if st.next_id != 0 && !st.pending.contains_key(&st.next_id) {
                break st.next_id;
            }
        };
        let seq = st.seq;
        st.seq += 1;
        let driven = st.direct.is_some() && matches!(waiter, Waiter::Caller(_)) && DRIVEN.with(|d| d.get());
        st.pending.insert(
            id,
            Pending {
                op,
                seq,
                counts,
                waiter,
                driven,
            },
        );
        if counts {
            st.inflight += 1;
        }
        match op {
            Op::Acquire => wire::append_acquire(&mut st.wbuf, id, key, (arg >> 32) as u32, arg as u32),
            Op::Release => wire::append_release(&mut st.wbuf, id, key, arg),
            Op::Cancel => wire::append_cancel(&mut st.wbuf, id, key, (arg >> 32) as u32),
            Op::Ping => wire::append_ping(&mut st.wbuf, id),
            Op::Query => wire::append_query(&mut st.wbuf, id, key),
            Op::AcquireSet => wire::append_acquire_set(&mut st.wbuf, id, key, (arg >> 32) as u32, arg as u32),
            Op::ReleaseSet => wire::append_release_set(&mut st.wbuf, id, key, arg),
            Op::Label => wire::append_label(&mut st.wbuf, id, key),
        }
        id
    }

    /// Down and never connected yet, first attempt still running.
    pub fn connecting(&self) -> bool {
        let st = self.st.lock().unwrap();
        !st.up && !st.ever_up && st.failures == 0
    }

    pub fn failed(&self, inner: &dyn Owner, e: ConnErr) {
        let n = {
            let mut st = self.st.lock().unwrap();
            st.failures += 1;
            st.last_err = Some(e.clone());
            st.failures
        };
        if n == 1 || matches!(e, ConnErr::Auth(..)) {
            crate::log(format_args!("connect to {} failed (attempt {n}): {e}", self.addr));
        }
        inner.changed();
    }

    fn up(&self, inner: &dyn Owner, max_inflight: u32, features: u16) -> Option<u64> {
        let epoch = {
            let mut st = self.st.lock().unwrap();
            if inner.is_closed() {
                return None;
            }
            st.up = true;
            st.ever_up = true;
            st.failures = 0;
            st.last_err = None;
            st.features = features;
            st.max_inflight = (max_inflight.max(1) as usize).min(1 << 30);
            st.inflight = 0;
            st.next_id = 0;
            st.seq = 0;
            st.taken = 0;
            st.wbuf.clear();
            st.writer = Writer::None;
            st.direct = None;
            st.tokens = 0;
            st.epoch
        };
        inner.changed();
        Some(epoch)
    }

    /// Takes the connection of `epoch` down and completes every pending
    /// request as unsent or lost.
    pub fn kill(&self, inner: &dyn Owner, epoch: u64, cause: &str) {
        let n;
        let mut wake = Vec::new();
        {
            let mut st = self.st.lock().unwrap();
            if st.epoch != epoch || !st.up {
                return;
            }
            st.up = false;
            st.epoch += 1;
            let taken = st.taken;
            let pending = std::mem::take(&mut st.pending);
            n = pending.len();
            for (_, p) in pending {
                match p.waiter {
                    Waiter::Caller(slot) => {
                        let r = if p.seq < taken { Reply::Lost } else { Reply::Unsent };
                        wake.extend(slot.fill(r));
                    }
                    Waiter::Abandoned(_) => {
                        inner.abandoned(-1);
                    }
                    Waiter::Dropped => {}
                }
            }
            st.inflight = 0;
            st.wbuf.clear();
            if st.wbuf.capacity() > 1 << 20 {
                st.wbuf = Vec::new();
            }
        }
        wake.into_iter().for_each(Waker::wake);
        if !inner.is_closed() {
            crate::log(format_args!("connection to {} lost ({n} pending): {cause}", self.addr));
        }
        inner.changed();
    }

    /// Matches every complete response in `b` to its pending request;
    /// returns the bytes used.
    /// `wake` (empty, kept by the reader between reads) takes the callers'
    /// wakers, woken here once the connection is unlocked.
    fn dispatch(&self, inner: &dyn Owner, epoch: u64, b: &[u8], wake: &mut Vec<Waker>) -> Result<usize, String> {
        let mut used = 0;
        let mut freed = false;
        let mut comps: Vec<(Arc<[u8]>, u64, bool)> = Vec::new();
        let mut res = Ok(());
        {
            let mut st = self.st.lock().unwrap();
            if st.epoch != epoch {
                return Err("connection replaced".into());
            }
            loop {
                let (r, n) = match wire::parse_response(&b[used..]) {
                    Ok(Some(x)) => x,
                    Ok(None) => break,
                    Err(e) => {
                        res = Err(e.to_string());
                        break;
                    }
                };
                used += n;
                let Some(p) = st.pending.get(&r.req_id) else {
                    continue; // unknown req_id: ignored
                };
                if r.status == Status::Error && r.code == Code::DUPLICATE_REQ_ID {
                    continue; // never complete an outstanding request with a code-25 E (§2.1)
                }
                if !r.status.fits(p.op) {
                    res = Err(format!("{:?} answered with {:?}", p.op, r.status));
                    break;
                }
                let p = st.pending.remove(&r.req_id).expect("pending");
                if p.counts {
                    st.inflight -= 1;
                    freed = true;
                }
                match p.waiter {
                    Waiter::Caller(slot) => {
                        // Its handle is alive (a dropped handle replaced the waiter).
                        let tok = p.driven && st.direct.is_some();
                        wake.extend(slot.fill(Reply::Answer(Answer {
                            status: r.status,
                            code: r.code,
                            queued: r.queued,
                            value: r.value,
                            payload: r.payload.to_vec(),
                            tok,
                        })));
                        if tok {
                            st.tokens += 1;
                        }
                    }
                    Waiter::Abandoned(key) => {
                        if matches!(p.op, Op::Acquire | Op::AcquireSet) && r.status == Status::Granted {
                            comps.push((key, r.value, p.op == Op::AcquireSet));
                        } else {
                            inner.abandoned(-1);
                        }
                    }
                    Waiter::Dropped => {}
                }
            }
        }
        wake.drain(..).for_each(Waker::wake);
        for (key, token, set) in comps {
            // The caller gave up but the grant won the race: release it ourselves.
            inner.unwanted_grant(key, token, set);
            inner.abandoned(-1);
        }
        if freed {
            inner.changed();
        }
        res.map(|_| used)
    }
}

/// The driver task of one connection: connect, serve, back off, until close.
pub(crate) async fn run(inner: Arc<dyn Owner>, conn: Arc<Conn>) {
    let mut closed = inner.close_rx();
    let mut attempt = 0u32;
    loop {
        if attempt > 0 {
            let d = inner.backoff_delay(attempt);
            tokio::select! {
                _ = tokio::time::sleep(d) => {}
                _ = closed.wait_for(|c| *c) => return,
            }
        }
        if inner.is_closed() {
            return;
        }
        let res = tokio::select! {
            r = tokio::time::timeout(inner.config().connect_timeout, connect(&*inner, &conn.addr)) => r,
            _ = closed.wait_for(|c| *c) => return,
        };
        let (stream, fd, max_inflight, features) = match res {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                conn.failed(&*inner, e);
                attempt += 1;
                continue;
            }
            Err(_) => {
                conn.failed(
                    &*inner,
                    ConnErr::other(format!(
                        "no connection to {} within {:?}",
                        conn.addr,
                        inner.config().connect_timeout
                    )),
                );
                attempt += 1;
                continue;
            }
        };
        let Some(epoch) = conn.up(&*inner, max_inflight, features) else {
            return;
        };
        crate::log(format_args!(
            "connected to {} (max_inflight {max_inflight}, features {features:#06x})",
            conn.addr
        ));
        let cause = tokio::select! {
            e = serve(&*inner, &conn, epoch, stream, fd) => e,
            _ = closed.wait_for(|c| *c) => "client closed".to_string(),
        };
        conn.kill(&*inner, epoch, &cause);
        if inner.is_closed() {
            return;
        }
        attempt = 1;
    }
}

/// The stream, the plain TCP socket callers may write to directly
/// (Config::direct_writes, not TLS), max_inflight and the features.
type Connected = (Transport, Option<Fd>, u32, u16);

/// A connection's stream: plain TCP (its reads may be shared with blocking
/// callers, [`Conn::help_read`]) or any other (TLS).
pub(crate) enum Transport {
    Tcp(tokio::net::TcpStream),
    #[allow(dead_code)] // only TLS makes one
    Other(Box<dyn Stream>),
}

async fn connect(inner: &dyn Owner, addr: &str) -> Result<Connected, ConnErr> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| ConnErr::io(format!("dial {addr}: {e}"), e))?;
    let _ = tcp.set_nodelay(true);
    // Detect a silently dead server as the server detects a dead client
    // (protocol.md §1 "Liveness"): probe after 15 s idle, every 5 s, 3 probes.
    let ka = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(15))
        .with_interval(Duration::from_secs(5));
    #[cfg(any(target_os = "linux", target_os = "macos", target_os = "freebsd"))]
    let ka = ka.with_retries(3);
    let _ = socket2::SockRef::from(&tcp).set_tcp_keepalive(&ka);
    #[cfg(feature = "rustls")]
    if let Some(tls) = &inner.config().tls {
        let host = crate::config::split_host_port(addr).map(|(h, _)| h).unwrap_or(addr);
        let mut s = tls.connect(addr, host, tcp).await?;
        let (mi, f) = handshake(inner, addr, &mut s, true).await?;
        return Ok((Transport::Other(Box::new(s)), None, mi, f));
    }
    let mut tcp = tcp;
    let (mi, f) = handshake(inner, addr, &mut tcp, false).await?;
    let fd = if inner.config().direct_writes {
        socket2::SockRef::from(&tcp)
            .try_clone()
            .ok()
            .map(|s| Arc::new(std::net::TcpStream::from(s)))
    } else {
        None
    };
    Ok((Transport::Tcp(tcp), fd, mi, f))
}

/// The req_ids of the handshake's feature ping and label (the connection's
/// own ids count up from 1 and never reach them while these are pending).
const FEATURE_REQ_ID: u32 = u32::MAX;
const LABEL_REQ_ID: u32 = u32::MAX - 1;

/// HELLO, AUTH (with the feature ping behind it, §12.1), WELCOME, the
/// feature pong and, when the server takes labels, the label (§12.3).
/// Returns max_inflight and the feature bits.
async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(inner: &dyn Owner, addr: &str, s: &mut S, tls: bool) -> Result<(u32, u16), ConnErr> {
    // A TLS alert after the handshake (e.g. the server refused our client
    // certificate under TLS 1.3) surfaces on the first read: a TLS error.
    let io = |what: &str, e: std::io::Error| {
        if tls && is_tls_error(&e) {
            ConnErr::Tls(format!("{what} from {addr}: {e}"), Some(Arc::new(e)))
        } else {
            ConnErr::io(format!("{what} from {addr}: {e}"), e)
        }
    };
    let mut b = [0u8; wire::AUTH_LEN];
    s.read_exact(&mut b[..wire::HELLO_LEN]).await.map_err(|e| io("reading HELLO", e))?;
    if !tls && wire::is_tls_required(&b[..wire::HELLO_LEN]) {
        // §12.4: a configuration error, not an outage.
        return Err(ConnErr::Tls(
            format!("the server at {addr} requires TLS (REJECT TLS_REQUIRED): configure TLS for it"),
            None,
        ));
    }
    let h = wire::parse_hello(&b[..wire::HELLO_LEN])
        .map_err(|e| ConnErr::Other(format!("{addr} is not a ticketing v1 server: {e}"), Some(Arc::new(e))))?;
    let mut nonce = [0u8; wire::NONCE_LEN];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce).map_err(|_| ConnErr::other("no randomness"))?;
    let role = inner.config().role;
    let token = &inner.config().token;
    let a = wire::Auth {
        role,
        nonce,
        proof: wire::client_proof(token, role, &h.nonce, &nonce),
    };
    let mut out = Vec::with_capacity(wire::AUTH_LEN + wire::HEADER_LEN);
    wire::append_auth(&mut out, &a);
    // The feature ping rides behind AUTH (§1 "Requests behind AUTH"): a 1.0
    // server answers a plain pong (features 0).
    wire::append_ping_features(&mut out, FEATURE_REQ_ID);
    s.write_all(&out).await.map_err(|e| io("sending AUTH", e))?;
    s.flush().await.map_err(|e| io("sending AUTH", e))?;
    s.read_exact(&mut b[..wire::WELCOME_LEN])
        .await
        .map_err(|e| io("reading WELCOME", e))?;
    let w = wire::parse_welcome(&b[..wire::WELCOME_LEN])
        .map_err(|e| ConnErr::Other(format!("bad WELCOME from {addr}: {e}"), Some(Arc::new(e))))?;
    if !w.accepted() {
        return Err(match w.code {
            Code::AUTH_FAILED | Code::BAD_HANDSHAKE => {
                let hint = if token.is_empty() && h.tokens_configured() {
                    " (the server requires a token and none is configured)"
                } else {
                    ""
                };
                ConnErr::Auth(Some(w.code), format!("handshake rejected by {addr} ({}){hint}", w.code))
            }
            c @ (Code::OVERLOADED | Code::SHUTTING_DOWN) => ConnErr::Busy(c),
            c => ConnErr::other(format!("handshake rejected by {addr} ({c})")),
        });
    }
    if !token.is_empty() {
        let want = wire::server_proof(token, role, &nonce, &h.nonce);
        if !wire::proof_eq(&want, &w.proof) {
            return Err(ConnErr::Auth(
                None,
                format!("{addr} did not prove the token (an impostor, or a server without this token)"),
            ));
        }
    }
    let pong = read_response(s, addr, tls, FEATURE_REQ_ID).await?;
    let features = if pong.status == Status::Pong { pong.queued } else { 0 };
    let label = inner.config().label.as_bytes();
    if features & wire::FEATURE_LABELS != 0 && !label.is_empty() {
        out.clear();
        wire::append_label(&mut out, LABEL_REQ_ID, label);
        s.write_all(&out).await.map_err(|e| io("sending the label", e))?;
        s.flush().await.map_err(|e| io("sending the label", e))?;
        let r = read_response(s, addr, tls, LABEL_REQ_ID).await?;
        if r.status != Status::Released {
            // The connection keeps no label (§12.3); nothing else changes.
            crate::log(format_args!("{addr} refused the connection label ({})", r.code));
        }
    }
    Ok((w.max_inflight.max(1), features))
}

/// Reads responses until the one answering `req_id` (the handshake's own
/// requests: nothing else is outstanding yet).
async fn read_response<S: AsyncRead + Unpin>(s: &mut S, addr: &str, tls: bool, req_id: u32) -> Result<Answer, ConnErr> {
    let io = |e: std::io::Error| {
        if tls && is_tls_error(&e) {
            ConnErr::Tls(format!("reading from {addr}: {e}"), Some(Arc::new(e)))
        } else {
            ConnErr::io(format!("reading from {addr}: {e}"), e)
        }
    };
    loop {
        let mut buf = vec![0u8; wire::HEADER_LEN];
        s.read_exact(&mut buf).await.map_err(io)?;
        let n = wire::response_frame_len(&buf);
        buf.resize(n, 0);
        s.read_exact(&mut buf[wire::HEADER_LEN..]).await.map_err(io)?;
        let (r, _) = match wire::parse_response(&buf) {
            Ok(Some(x)) => x,
            Ok(None) => return Err(ConnErr::other(format!("short response from {addr}"))),
            Err(e) => return Err(ConnErr::Other(format!("protocol violation by {addr}: {e}"), Some(Arc::new(e)))),
        };
        if r.req_id == req_id {
            return Ok(Answer {
                status: r.status,
                code: r.code,
                queued: r.queued,
                value: r.value,
                payload: r.payload.to_vec(),
                tok: false,
            });
        }
    }
}

#[cfg(feature = "rustls")]
fn is_tls_error(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<rustls::Error>())
}

#[cfg(not(feature = "rustls"))]
fn is_tls_error(_: &std::io::Error) -> bool {
    false
}

/// A non-blocking send of `b` (tokio set O_NONBLOCK on the socket, shared
/// by its duplicate): the bytes taken, fewer when the socket buffer is full.
/// std's send passes MSG_NOSIGNAL.
fn send_nonblocking(s: &std::net::TcpStream, b: &[u8]) -> std::io::Result<usize> {
    use std::io::Write;
    let mut off = 0;
    while off < b.len() {
        match (&*s).write(&b[off..]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => off += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(off)
}

/// Lets callers write to the socket while the driver serves it; dropped
/// with the stream, it withdraws the duplicate (a caller's send in progress
/// holds the last reference and closes it when done).
struct DirectGuard<'a> {
    conn: &'a Conn,
}

impl Drop for DirectGuard<'_> {
    fn drop(&mut self) {
        self.conn.rd.lock().unwrap().fd = None;
        self.conn.st.lock().unwrap().direct = None;
    }
}

async fn serve(inner: &dyn Owner, conn: &Arc<Conn>, epoch: u64, stream: Transport, fd: Option<Fd>) -> String {
    let _direct = DirectGuard { conn };
    match (stream, fd) {
        (Transport::Tcp(mut tcp), Some(fd)) => {
            // Callers write (st.direct) and read (rd.fd) this socket too.
            *conn.rd.lock().unwrap() = ReadSide::new(epoch, Some(fd.clone()));
            {
                let mut st = conn.st.lock().unwrap();
                if st.epoch == epoch {
                    st.direct = Some(fd);
                }
            }
            let (rd, mut wr) = tcp.split();
            tokio::select! {
                e = read_shared(inner, conn, rd.as_ref()) => e,
                e = write_loop(inner, conn, epoch, &mut wr) => e,
            }
        }
        (Transport::Tcp(tcp), None) => serve_stream(inner, conn, epoch, tcp).await,
        (Transport::Other(s), _) => serve_stream(inner, conn, epoch, s).await,
    }
}

async fn serve_stream<S: AsyncRead + AsyncWrite + Unpin>(inner: &dyn Owner, conn: &Arc<Conn>, epoch: u64, stream: S) -> String {
    let (mut rd, mut wr) = tokio::io::split(stream);
    let read = async {
        let mut rs = ReadSide::new(epoch, None);
        loop {
            let n = match rd.read(rs.space()).await {
                Ok(0) => return "connection closed by the server".to_string(),
                Ok(n) => n,
                Err(e) => return format!("read: {e}"),
            };
            if let Err(e) = rs.consume(conn, inner, n) {
                return e;
            }
        }
    };
    tokio::select! {
        e = read => e,
        e = write_loop(inner, conn, epoch, &mut wr) => e,
    }
}

/// The driver's reads of a socket whose reads blocking callers share
/// (conn.rd): each readiness, it takes the read side (a caller holds it for
/// one non-blocking read and its dispatch) and reads until the socket is empty.
async fn read_shared(inner: &dyn Owner, conn: &Conn, tcp: &tokio::net::TcpStream) -> String {
    loop {
        tokio::select! {
            r = tcp.readable() => if let Err(e) = r {
                return format!("read: {e}");
            },
            _ = conn.rd_kick.notified() => {}
        }
        let mut rs = conn.rd.lock().unwrap();
        if let Some(e) = rs.failed.take() {
            return e;
        }
        loop {
            match tcp.try_read(rs.space()) {
                Ok(0) => return "connection closed by the server".to_string(),
                Ok(n) => {
                    if let Err(e) = rs.consume(conn, inner, n) {
                        return e;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return format!("read: {e}"),
            }
        }
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(inner: &dyn Owner, conn: &Conn, epoch: u64, wr: &mut W) -> String {
    let mut spare: Vec<u8> = Vec::new();
    loop {
        conn.kick.notified().await;
        // Let runnable senders append their frames first: one write then
        // carries many frames.
        tokio::task::yield_now().await;
        loop {
            let mut buf = {
                let mut st = conn.st.lock().unwrap();
                if st.epoch != epoch {
                    return "connection replaced".to_string();
                }
                if st.writer == Writer::Caller || st.wbuf.is_empty() {
                    // A calling thread writes them (and kicks when it leaves some).
                    if st.writer == Writer::Driver {
                        st.writer = Writer::None;
                    }
                    break;
                }
                st.writer = Writer::Driver;
                st.taken = st.seq;
                std::mem::replace(&mut st.wbuf, std::mem::take(&mut spare))
            };
            if let Err(e) = wr.write_all(&buf).await {
                return format!("write: {e}");
            }
            if let Err(e) = wr.flush().await {
                return format!("write: {e}");
            }
            if buf.len() > MAX_WRITE_BUFFER {
                inner.changed();
            }
            buf.clear();
            if buf.capacity() > 1 << 20 {
                buf = Vec::new();
            }
            spare = buf;
            // Frames queued during the write wait for it (no kick while
            // the driver writes): let more senders append, then take them.
            tokio::task::yield_now().await;
        }
    }
}

impl From<&ConnErr> for Error {
    fn from(e: &ConnErr) -> Error {
        match e {
            ConnErr::Auth(c, _) => ErrorKind::Auth(*c).into(),
            ConnErr::Tls(m, src) => Error::from(ErrorKind::Tls(m.clone())).with_source(src.clone()),
            ConnErr::Busy(c) => ErrorKind::Busy(*c).into(),
            ConnErr::Other(m, src) => Error::from(ErrorKind::Connect(m.clone())).with_source(src.clone()),
        }
    }
}
