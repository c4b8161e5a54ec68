//! The testkit driver (shared/design/testkit.md): JSON lines on stdin, one
//! result line per command on stdout, in completion order. Commands run
//! concurrently on one `ticketing::Client`; `cancel` drops the target's
//! acquire future (the crate's native cancellation).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};
use ticketing::{AcquireOptions, Client, Config, Error, ErrorKind};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot, watch};

type Out = mpsc::UnboundedSender<Value>;

/// The API under test: the async client, or `blocking::Client` when the
/// runner starts the driver with TESTKIT_VARIANT=blocking (testkit README "Variants").
#[derive(Clone)]
enum Api {
    Async(Client),
    Blocking(ticketing::blocking::Client),
}

fn blocking_variant() -> bool {
    std::env::var("TESTKIT_VARIANT").is_ok_and(|v| v == "blocking")
}

/// A lease object this driver holds (release_lease, lease_ending): `None`
/// once released through the object (a Rust lease is consumed by its release,
/// so a second release of the same object cannot happen: R6 answers
/// `already` for it).
enum Held {
    Async(ticketing::Lease),
    Blocking(ticketing::blocking::Lease),
}

impl Held {
    fn detach(self) {
        match self {
            Held::Async(l) => {
                let _ = l.detach();
            }
            Held::Blocking(l) => {
                let _ = l.detach();
            }
        }
    }
}

#[derive(Default)]
struct State {
    client: Option<Api>,
    /// Closed when the current client is closed: pending commands answer `closed`.
    gen: Option<watch::Sender<bool>>,
    cancels: HashMap<i64, oneshot::Sender<()>>,
    /// By token: the leases this driver acquired (the runner also releases
    /// them by token; they are detached, never released, at exit).
    leases: HashMap<String, Option<Held>>,
}

type Shared = Arc<Mutex<State>>;

fn err_line(id: &Value, e: &Error) -> Value {
    let kind = match e.kind() {
        ErrorKind::Timeout => "timeout",
        ErrorKind::Busy(_) | ErrorKind::NoLeader => "busy",
        ErrorKind::Indeterminate => "indeterminate",
        ErrorKind::NotHolder => "not_holder",
        ErrorKind::Invalid(_) => "invalid",
        ErrorKind::Auth(_) => "auth",
        ErrorKind::Tls(_) => "tls",
        ErrorKind::Connect(_) => "connect",
        ErrorKind::Cancelled => "cancelled",
        ErrorKind::Closed => "closed",
        ErrorKind::Protocol(_) => "protocol",
        ErrorKind::InsufficientLease(_) => "insufficient_lease",
        ErrorKind::Unsupported(_) => "unsupported",
        _ => "internal",
    };
    let mut m = Map::new();
    m.insert("id".into(), id.clone());
    m.insert("ok".into(), Value::Bool(false));
    m.insert("error".into(), kind.into());
    if let Some(c) = e.code() {
        m.insert("code".into(), c.0.into());
    } else if *e == ErrorKind::NoLeader {
        m.insert("code".into(), ticketing::Code::NO_QUORUM.0.into()); // no leader within the hop limit and the wait
    }
    m.insert("message".into(), e.to_string().into());
    Value::Object(m)
}

fn simple_err(id: &Value, kind: &str, msg: &str) -> Value {
    json!({"id": id, "ok": false, "error": kind, "message": msg})
}

fn ok_line(id: &Value, mut fields: Map<String, Value>) -> Value {
    fields.insert("id".into(), id.clone());
    fields.insert("ok".into(), Value::Bool(true));
    Value::Object(fields)
}

/// A JSON string with lone UTF-16 surrogates (R8) cannot be a Rust string:
/// `parse_line` replaces each lone `\uD800`..`\uDFFF` escape by this
/// private-use character and `key_of` puts the surrogate's WTF-8 bytes back
/// (never valid UTF-8, so the client must refuse the key, never replace it).
const SURROGATE_MARK: char = '\u{F8FF}';

fn parse_line(line: &str) -> serde_json::Result<Value> {
    match serde_json::from_str::<Value>(line) {
        Ok(v) => Ok(v),
        Err(e) => {
            let mut out = String::with_capacity(line.len());
            let mut rest = line;
            let mut changed = false;
            while let Some(i) = rest.find("\\u") {
                out.push_str(&rest[..i]);
                let esc = &rest[i..];
                let hex = esc.get(2..6).and_then(|h| u16::from_str_radix(h, 16).ok());
                if let Some(cu @ 0xD800..=0xDFFF) = hex {
                    out.push(SURROGATE_MARK);
                    out.push_str(&format!("{cu:04x}"));
                    changed = true;
                } else {
                    out.push_str(&esc[..2]);
                    rest = &esc[2..];
                    continue;
                }
                rest = &esc[6..];
            }
            out.push_str(rest);
            if changed {
                serde_json::from_str::<Value>(&out)
            } else {
                Err(e)
            }
        }
    }
}

fn key_of(cmd: &Value) -> Result<Vec<u8>, String> {
    if let Some(k) = cmd.get("key").and_then(Value::as_str) {
        let mut b = Vec::with_capacity(k.len());
        let mut it = k.char_indices().peekable();
        while let Some((i, c)) = it.next() {
            if c == SURROGATE_MARK {
                if let Some(Ok(cu)) = k.get(i + c.len_utf8()..i + c.len_utf8() + 4).map(|h| u32::from_str_radix(h, 16)) {
                    // WTF-8 of the lone surrogate: ED A0..BF 80..BF.
                    b.extend_from_slice(&[0xE0 | (cu >> 12) as u8, 0x80 | ((cu >> 6) & 0x3F) as u8, 0x80 | (cu & 0x3F) as u8]);
                    for _ in 0..4 {
                        it.next();
                    }
                    continue;
                }
            }
            let mut buf = [0u8; 4];
            b.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
        return Ok(b);
    }
    if let Some(h) = cmd.get("key_hex").and_then(Value::as_str) {
        if h.len() % 2 != 0 {
            return Err("key_hex: odd length".into());
        }
        return (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).map_err(|e| format!("key_hex: {e}")))
            .collect();
    }
    Err("missing key".into())
}

fn ms(cmd: &Value, name: &str) -> Result<Duration, String> {
    match cmd.get(name) {
        None | Some(Value::Null) => Ok(Duration::ZERO),
        Some(v) => match v.as_i64() {
            Some(n) if n >= 0 => Ok(Duration::from_millis(n as u64)),
            // A Duration cannot be negative: the type is the client's check (R8).
            Some(n) => Err(format!("{name} {n} ms must not be negative (0..{} ms)", u32::MAX)),
            None => Err(format!("{name} must be an integer")),
        },
    }
}

fn current(st: &Shared) -> Option<(Api, watch::Receiver<bool>)> {
    let s = st.lock().unwrap();
    Some((s.client.clone()?, s.gen.as_ref()?.subscribe()))
}

async fn run_cmd(st: Shared, out: Out, cmd: Value) {
    let id = cmd.get("id").cloned().unwrap_or(Value::Null);
    let name = cmd.get("cmd").and_then(Value::as_str).unwrap_or("").to_string();
    let line = match name.as_str() {
        "connect" => connect(&st, &id, &cmd).await,
        "info" => {
            let mut m = Map::new();
            if blocking_variant() {
                m.insert("language".into(), "rust-blocking".into());
                m.insert(
                    "runtime".into(),
                    "blocking::Client (its own runtime thread drives the sockets), one OS thread per call".into(),
                );
            } else {
                m.insert("language".into(), "rust".into());
                m.insert("runtime".into(), "tokio 1 (multi-thread runtime, 2 workers)".into());
            }
            m.insert("client_version".into(), ticketing::VERSION.into());
            ok_line(&id, m)
        }
        "close" => {
            close_client(&st).await;
            ok_line(&id, Map::new())
        }
        "cancel" => {
            let target = cmd.get("target").and_then(Value::as_i64).unwrap_or(-1);
            if let Some(tx) = st.lock().unwrap().cancels.remove(&target) {
                let _ = tx.send(());
            }
            ok_line(&id, Map::new())
        }
        "acquire" | "release" | "with_lock" | "try_acquire" | "acquire_set" | "release_set" | "release_lease" | "lease_ending" => {
            let Some((client, mut gen)) = current(&st) else {
                let _ = out.send(simple_err(&id, "closed", "no client (connect first)"));
                return;
            };
            // Any pending operation can be cancelled: its future is dropped.
            let cancel_rx = {
                let (tx, rx) = oneshot::channel();
                if let Some(n) = id.as_i64() {
                    st.lock().unwrap().cancels.insert(n, tx);
                }
                rx
            };
            let line = if let Api::Blocking(_) = &client {
                // The blocking API's own cancellation: its token, from another thread.
                let tok = ticketing::blocking::CancelToken::new();
                let t2 = tok.clone();
                tokio::spawn(async move {
                    if cancel_rx.await.is_ok() {
                        t2.cancel();
                    }
                });
                tokio::select! {
                    l = op(&st, &client, &id, &name, &cmd, Some(tok)) => l,
                    _ = gen.wait_for(|c| *c) => err_line(&id, &ErrorKind::Closed.into()),
                }
            } else {
                let work = op(&st, &client, &id, &name, &cmd, None);
                tokio::select! {
                    l = work => l,
                    Ok(()) = cancel_rx => {
                        // The operation's future was dropped: the client withdraws a
                        // queued acquire (and compensates a grant that won the race),
                        // and carries on a release in the background.
                        err_line(&id, &ErrorKind::Cancelled.into())
                    }
                    _ = gen.wait_for(|c| *c) => err_line(&id, &ErrorKind::Closed.into()),
                }
            };
            if let Some(n) = id.as_i64() {
                st.lock().unwrap().cancels.remove(&n);
            }
            line
        }
        other => simple_err(&id, "internal", &format!("unknown cmd {other:?}")),
    };
    let _ = out.send(line);
}

fn lease_line(id: &Value, token: u64, remaining: Duration) -> Value {
    let mut m = Map::new();
    m.insert("token".into(), token.to_string().into());
    m.insert("deadline_in_ms".into(), (remaining.as_millis() as u64).into());
    ok_line(id, m)
}

fn keys_of(cmd: &Value) -> Vec<String> {
    cmd.get("keys")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

fn opts_of(cmd: &Value) -> AcquireOptions {
    let mut o = AcquireOptions::new();
    if let Some(n) = cmd.get("min_remaining_ms").and_then(Value::as_u64).filter(|n| *n > 0) {
        o = o.min_remaining(Duration::from_millis(n)); // R14
    }
    o
}

fn keep(st: &Shared, token: u64, l: Held) {
    st.lock().unwrap().leases.insert(token.to_string(), Some(l));
}

/// The lease object named by the command's token: `Ok(None)` when it was
/// released through the object already.
fn take_lease(st: &Shared, cmd: &Value) -> Result<Option<Held>, String> {
    let tok = cmd_token(cmd).ok_or("token must be a decimal string")?;
    let mut s = st.lock().unwrap();
    match s.leases.get_mut(&tok.to_string()) {
        Some(slot) => Ok(slot.take()),
        None => Err(format!("no lease with token {tok} acquired by this driver")),
    }
}

fn put_back(st: &Shared, cmd: &Value, l: Held) {
    if let Some(t) = cmd_token(cmd) {
        st.lock().unwrap().leases.insert(t.to_string(), Some(l));
    }
}

/// After a release by token answered `O`: the object no longer manages it.
fn forget(st: &Shared, token: u64) {
    let l = st.lock().unwrap().leases.remove(&token.to_string()).flatten();
    if let Some(l) = l {
        l.detach();
    }
}

fn cmd_token(cmd: &Value) -> Option<u64> {
    cmd.get("token").and_then(|t| match t {
        Value::String(s) => s.parse::<u64>().ok(),
        Value::Number(n) => n.as_u64(),
        _ => None,
    })
}

async fn op(st: &Shared, api: &Api, id: &Value, name: &str, cmd: &Value, cancel: Option<ticketing::blocking::CancelToken>) -> Value {
    // The lease objects' own calls (R6, R12), on either API.
    match name {
        "release_lease" => {
            let l = match take_lease(st, cmd) {
                Ok(Some(l)) => l,
                Ok(None) => return ok_line(id, Map::from_iter([("already".to_string(), Value::Bool(true))])),
                Err(m) => return simple_err(id, "invalid", &m),
            };
            let r = match l {
                Held::Async(l) => l.release().await,
                Held::Blocking(l) => tokio::task::spawn_blocking(move || l.release())
                    .await
                    .unwrap_or_else(|_| Err(ErrorKind::Closed.into())),
            };
            return match r {
                Ok(()) => ok_line(id, Map::from_iter([("already".to_string(), Value::Bool(false))])),
                Err(e) => err_line(id, &e),
            };
        }
        "lease_ending" => {
            let margin = ms(cmd, "margin_ms").unwrap_or_default();
            let l = match take_lease(st, cmd) {
                Ok(Some(l)) => l,
                // Released: its end has come (it never fails after release).
                Ok(None) => return ok_line(id, Map::from_iter([("remaining_ms".to_string(), Value::from(0))])),
                Err(m) => return simple_err(id, "invalid", &m),
            };
            let (rem, l) = match l {
                Held::Async(l) => {
                    // The object stays the driver's: wait on a borrowed lease.
                    let deadline = l.deadline();
                    put_back(st, cmd, Held::Async(l));
                    let at = deadline.checked_sub(margin).unwrap_or(deadline);
                    tokio::time::sleep_until(at.into()).await;
                    (deadline.saturating_duration_since(std::time::Instant::now()), None)
                }
                Held::Blocking(l) => {
                    let rx = l.expiring(margin);
                    let deadline = l.deadline();
                    put_back(st, cmd, Held::Blocking(l));
                    let _ = tokio::task::spawn_blocking(move || rx.recv()).await;
                    (deadline.saturating_duration_since(std::time::Instant::now()), None::<Held>)
                }
            };
            drop(l);
            return ok_line(
                id,
                Map::from_iter([("remaining_ms".to_string(), Value::from(rem.as_millis() as u64))]),
            );
        }
        _ => {}
    }
    let (lease, wait) = match (ms(cmd, "lease_ms"), ms(cmd, "wait_ms")) {
        (Ok(l), Ok(w)) => (l, w),
        (Err(m), _) | (_, Err(m)) => return simple_err(id, "invalid", &m),
    };
    let key = if matches!(name, "acquire_set" | "release_set") {
        Vec::new()
    } else {
        match key_of(cmd) {
            Ok(k) => k,
            Err(m) => return simple_err(id, "invalid", &m),
        }
    };
    let client = match api {
        Api::Async(c) => c,
        Api::Blocking(b) => {
            // One OS thread per call, as a synchronous program would make.
            let (b, id, name, cmd, st) = (b.clone(), id.clone(), name.to_string(), cmd.clone(), st.clone());
            let cancel = cancel.unwrap_or_default();
            return tokio::task::spawn_blocking(move || op_blocking(&st, &b, &id, &name, &cmd, key, lease, wait, &cancel))
                .await
                .unwrap_or_else(|e| json!({"ok": false, "error": "internal", "message": e.to_string()}));
        }
    };
    match name {
        "acquire" => match client.acquire_with(&key, lease, wait, &opts_of(cmd)).await {
            Ok(l) => {
                let line = lease_line(id, l.token(), l.remaining());
                // The runner releases by token: the lock stays held.
                keep(st, l.token(), Held::Async(l));
                line
            }
            Err(e) => err_line(id, &e),
        },
        "acquire_set" => match client.acquire_set(&keys_of(cmd), lease, wait).await {
            Ok(l) => {
                let line = lease_line(id, l.token(), l.remaining());
                keep(st, l.token(), Held::Async(l));
                line
            }
            Err(e) => err_line(id, &e),
        },
        "try_acquire" => match client.try_acquire_for(&key, lease, wait).await {
            Ok(l) => try_line(id, l.map(|l| l.detach())),
            Err(e) => err_line(id, &e),
        },
        "release" | "release_set" => {
            let Some(token) = cmd_token(cmd) else {
                return simple_err(id, "invalid", "token must be a decimal string");
            };
            let r = if name == "release" {
                client.release(&key, token).await
            } else {
                client.release_set(&keys_of(cmd), token).await
            };
            match r {
                Ok(()) => {
                    forget(st, token);
                    ok_line(id, Map::new())
                }
                Err(e) => err_line(id, &e),
            }
        }
        _ => {
            let hold = ms(cmd, "hold_ms").unwrap_or_default();
            let fail = cmd.get("fail").and_then(Value::as_bool).unwrap_or(false);
            let r = client
                .with_lock(&key, lease, wait, async |l| {
                    tokio::time::sleep(hold).await;
                    if fail {
                        Err(l.token())
                    } else {
                        Ok(l.token())
                    }
                })
                .await;
            match r {
                // The failing scope's error is swallowed once the scope released the lock.
                Ok(Ok(t)) | Ok(Err(t)) => {
                    let mut m = Map::new();
                    m.insert("token".into(), t.to_string().into());
                    ok_line(id, m)
                }
                Err(e) => err_line(id, &e),
            }
        }
    }
}

/// try_acquire's answer (R13): acquired false, or true with the token (the
/// lease detached: the runner releases it by token).
fn try_line(id: &Value, token: Option<u64>) -> Value {
    let mut m = Map::new();
    m.insert("acquired".into(), token.is_some().into());
    if let Some(t) = token {
        m.insert("token".into(), t.to_string().into());
    }
    ok_line(id, m)
}

#[allow(clippy::too_many_arguments)]
fn op_blocking(
    st: &Shared,
    client: &ticketing::blocking::Client,
    id: &Value,
    name: &str,
    cmd: &Value,
    key: Vec<u8>,
    lease: Duration,
    wait: Duration,
    cancel: &ticketing::blocking::CancelToken,
) -> Value {
    match name {
        "acquire" => match client.acquire_with_cancel(&key, lease, wait, &opts_of(cmd), cancel) {
            Ok(l) => {
                let line = lease_line(id, l.token(), l.remaining());
                keep(st, l.token(), Held::Blocking(l));
                line
            }
            Err(e) => err_line(id, &e),
        },
        "acquire_set" => match client.acquire_set_cancellable(&keys_of(cmd), lease, wait, cancel) {
            Ok(l) => {
                let line = lease_line(id, l.token(), l.remaining());
                keep(st, l.token(), Held::Blocking(l));
                line
            }
            Err(e) => err_line(id, &e),
        },
        "try_acquire" => match client.try_acquire_for(&key, lease, wait) {
            Ok(l) => try_line(id, l.map(|l| l.detach())),
            Err(e) => err_line(id, &e),
        },
        "release" | "release_set" => {
            let Some(token) = cmd_token(cmd) else {
                return simple_err(id, "invalid", "token must be a decimal string");
            };
            let r = if name == "release" {
                client.release(&key, token)
            } else {
                client.release_set(&keys_of(cmd), token)
            };
            match r {
                Ok(()) => {
                    forget(st, token);
                    ok_line(id, Map::new())
                }
                Err(e) => err_line(id, &e),
            }
        }
        _ => {
            let hold = ms(cmd, "hold_ms").unwrap_or_default();
            let fail = cmd.get("fail").and_then(Value::as_bool).unwrap_or(false);
            // with_lock's scope on the cancellable acquire (R11: a cancel
            // withdraws the waiting acquire); the guard's drop releases on
            // both the normal and the failing exit, and when the program
            // ends the hold (R10: the driver cancels open scopes at exit).
            let r = client.acquire_cancellable(&key, lease, wait, cancel).map(|guard| {
                let end = std::time::Instant::now() + hold;
                while std::time::Instant::now() < end && !cancel.is_cancelled() {
                    std::thread::sleep(Duration::from_millis(10).min(end.saturating_duration_since(std::time::Instant::now())));
                }
                let t = guard.token();
                let _failed: Result<(), ()> = if fail { Err(()) } else { Ok(()) };
                drop(guard);
                t
            });
            match r {
                Ok(t) => {
                    let mut m = Map::new();
                    m.insert("token".into(), t.to_string().into());
                    ok_line(id, m)
                }
                Err(e) => err_line(id, &e),
            }
        }
    }
}

async fn close_client(st: &Shared) {
    let (c, g, leases) = {
        let mut s = st.lock().unwrap();
        (s.client.take(), s.gen.take(), std::mem::take(&mut s.leases))
    };
    // The runner releases what it acquired by token; a lease object left
    // here is detached, never released behind the runner's back.
    for l in leases.into_values().flatten() {
        l.detach();
    }
    if let Some(g) = g {
        let _ = g.send(true);
    }
    match c {
        Some(Api::Async(c)) => c.close().await,
        Some(Api::Blocking(b)) => {
            let _ = tokio::task::spawn_blocking(move || b.close()).await;
        }
        None => {}
    }
}

async fn connect(st: &Shared, id: &Value, cmd: &Value) -> Value {
    close_client(st).await;
    let mut b = Config::builder();
    if let Some(addrs) = cmd.get("addrs").and_then(Value::as_array) {
        b = b.addrs(addrs.iter().filter_map(Value::as_str).map(str::to_string));
    }
    if let Some(t) = cmd.get("token").and_then(Value::as_str) {
        b = b.token(t);
    }
    if let Some(n) = cmd.get("connect_timeout_ms").and_then(Value::as_u64) {
        b = b.connect_timeout(Duration::from_millis(n));
    }
    if let Some(l) = cmd.get("label").and_then(Value::as_str) {
        b = b.label(l); // protocol.md §12.3
    }
    if let Some(n) = cmd.get("answer_allowance_ms").and_then(Value::as_u64) {
        b = b.answer_allowance(Duration::from_millis(n)); // edge rule R2
    }
    if let Some(tls) = cmd.get("tls").filter(|v| v.is_object()) {
        let s = |k: &str| tls.get(k).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
        let Some(ca) = s("ca") else {
            return simple_err(id, "tls", "tls.ca missing");
        };
        let client = match (s("cert"), s("key")) {
            (Some(c), Some(k)) => Some((c, k)),
            _ => None,
        };
        let mut t = match ticketing::TlsConfig::from_pem_files(ca, client) {
            Ok(t) => t,
            Err(e) => return err_line(id, &e),
        };
        if let Some(n) = s("server_name") {
            t = t.server_name(n);
        }
        b = b.tls(t);
    }
    let cfg = match b.build() {
        Ok(c) => c,
        Err(e) => return err_line(id, &e),
    };
    let api = if blocking_variant() {
        tokio::task::spawn_blocking(move || ticketing::blocking::Client::connect(cfg).map(Api::Blocking))
            .await
            .unwrap_or(Err(ErrorKind::Closed.into()))
    } else {
        Client::connect(cfg).await.map(Api::Async)
    };
    match api {
        Ok(c) => {
            let mut s = st.lock().unwrap();
            s.client = Some(c);
            s.gen = Some(watch::channel(false).0);
            ok_line(id, Map::new())
        }
        Err(e) => err_line(id, &e),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(v) = out_rx.recv().await {
            let mut line = v.to_string();
            line.push('\n');
            if stdout.write_all(line.as_bytes()).await.is_err() || stdout.flush().await.is_err() {
                break;
            }
        }
    });
    let st: Shared = Arc::default();
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut tasks = tokio::task::JoinSet::new();
    while let Ok(Some(line)) = lines.next_line().await {
        if line.trim().is_empty() {
            continue;
        }
        match parse_line(&line) {
            // connect and close run before the next line is read: later
            // commands use the client connect made (as the Go driver).
            Ok(cmd) if matches!(cmd.get("cmd").and_then(Value::as_str), Some("connect" | "close")) => {
                run_cmd(st.clone(), out_tx.clone(), cmd).await;
            }
            Ok(cmd) => {
                tasks.spawn(run_cmd(st.clone(), out_tx.clone(), cmd));
            }
            Err(e) => {
                let _ = out_tx.send(simple_err(&Value::Null, "internal", &format!("bad JSON: {e}")));
            }
        }
    }
    // EOF ends the program: open scopes end (their leases are released,
    // R10) and every pending command ends, as the Go driver; background
    // releases drain (the async client's one line at the end of main), then
    // the client closes.
    let cancels: Vec<_> = st.lock().unwrap().cancels.drain().map(|(_, tx)| tx).collect();
    for tx in cancels {
        let _ = tx.send(());
    }
    while tasks.join_next().await.is_some() {}
    let client = st.lock().unwrap().client.clone();
    match client {
        Some(Api::Async(c)) => c.drain().await,
        Some(Api::Blocking(b)) => {
            let _ = tokio::task::spawn_blocking(move || b.drain()).await;
        }
        None => {}
    }
    close_client(&st).await;
    drop(out_tx);
    let _ = writer.await;
}
