//! The testkit driver (shared/design/testkit.md): JSON lines on stdin, one
//! result line per command on stdout, in completion order. Commands run
//! concurrently on one `ticketing::Client`; `cancel` drops the target's
//! acquire future (the crate's native cancellation).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};
use ticketing::{Client, Config, Error};
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

#[derive(Default)]
struct State {
    client: Option<Api>,
    /// Closed when the current client is closed: pending commands answer `closed`.
    gen: Option<watch::Sender<bool>>,
    cancels: HashMap<i64, oneshot::Sender<()>>,
}

type Shared = Arc<Mutex<State>>;

fn err_line(id: &Value, e: &Error) -> Value {
    let kind = match e {
        Error::Timeout => "timeout",
        Error::Busy(_) | Error::NoLeader => "busy",
        Error::Indeterminate => "indeterminate",
        Error::NotHolder => "not_holder",
        Error::Invalid(_) => "invalid",
        Error::Auth(_) => "auth",
        Error::Tls(_) => "tls",
        Error::Connect(_) => "connect",
        Error::Cancelled => "cancelled",
        Error::Closed => "closed",
        Error::Protocol(_) => "protocol",
        _ => "internal",
    };
    let mut m = Map::new();
    m.insert("id".into(), id.clone());
    m.insert("ok".into(), Value::Bool(false));
    m.insert("error".into(), kind.into());
    if let Some(c) = e.code() {
        m.insert("code".into(), c.0.into());
    } else if *e == Error::NoLeader {
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

fn key_of(cmd: &Value) -> Result<Vec<u8>, String> {
    if let Some(k) = cmd.get("key").and_then(Value::as_str) {
        return Ok(k.as_bytes().to_vec());
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
            // A negative duration: the client's own argument check.
            Some(_) => Err(format!("{name} must not be negative")),
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
                    "blocking::Client (its own runtime thread), one OS thread per call".into(),
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
        "acquire" | "release" | "with_lock" | "try_acquire" => {
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
                    l = op(&client, &id, &name, &cmd, Some(tok)) => l,
                    _ = gen.wait_for(|c| *c) => err_line(&id, &Error::Closed),
                }
            } else {
                let work = op(&client, &id, &name, &cmd, None);
                tokio::select! {
                    l = work => l,
                    Ok(()) = cancel_rx => {
                        // The operation's future was dropped: the client withdraws a
                        // queued acquire (and compensates a grant that won the race),
                        // and carries on a release in the background.
                        err_line(&id, &Error::Cancelled)
                    }
                    _ = gen.wait_for(|c| *c) => err_line(&id, &Error::Closed),
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

async fn op(api: &Api, id: &Value, name: &str, cmd: &Value, cancel: Option<ticketing::blocking::CancelToken>) -> Value {
    let key = match key_of(cmd) {
        Ok(k) => k,
        Err(m) => return simple_err(id, "invalid", &m),
    };
    let (lease, wait) = match (ms(cmd, "lease_ms"), ms(cmd, "wait_ms")) {
        (Ok(l), Ok(w)) => (l, w),
        (Err(m), _) | (_, Err(m)) => return simple_err(id, "invalid", &m),
    };
    let client = match api {
        Api::Async(c) => c,
        Api::Blocking(b) => {
            // One OS thread per call, as a synchronous program would make.
            let (b, id, name, cmd) = (b.clone(), id.clone(), name.to_string(), cmd.clone());
            let cancel = cancel.unwrap_or_default();
            return tokio::task::spawn_blocking(move || op_blocking(&b, &id, &name, &cmd, key, lease, wait, &cancel))
                .await
                .unwrap_or_else(|e| json!({"ok": false, "error": "internal", "message": e.to_string()}));
        }
    };
    match name {
        "acquire" => match client.acquire(&key, lease, wait).await {
            Ok(l) => {
                let mut m = Map::new();
                m.insert("token".into(), l.token().to_string().into());
                m.insert("deadline_in_ms".into(), (l.remaining().as_millis() as u64).into());
                // The runner releases by token: keep the lock held.
                let _ = l.detach();
                ok_line(id, m)
            }
            Err(e) => err_line(id, &e),
        },
        "try_acquire" => match client.try_acquire_for(&key, lease, wait).await {
            Ok(l) => try_line(id, l.map(|l| l.detach())),
            Err(e) => err_line(id, &e),
        },
        "release" => {
            let token = cmd.get("token").and_then(|t| match t {
                Value::String(s) => s.parse::<u64>().ok(),
                Value::Number(n) => n.as_u64(),
                _ => None,
            });
            let Some(token) = token else {
                return simple_err(id, "invalid", "token must be a decimal string");
            };
            match client.release(&key, token).await {
                Ok(()) => ok_line(id, Map::new()),
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

fn token_of(cmd: &Value) -> Option<u64> {
    cmd.get("token").and_then(|t| match t {
        Value::String(s) => s.parse::<u64>().ok(),
        Value::Number(n) => n.as_u64(),
        _ => None,
    })
}

#[allow(clippy::too_many_arguments)]
fn op_blocking(
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
        "acquire" => match client.acquire_cancellable(&key, lease, wait, cancel) {
            Ok(l) => {
                let mut m = Map::new();
                m.insert("token".into(), l.token().to_string().into());
                m.insert("deadline_in_ms".into(), (l.remaining().as_millis() as u64).into());
                let _ = l.detach();
                ok_line(id, m)
            }
            Err(e) => err_line(id, &e),
        },
        "try_acquire" => match client.try_acquire_for(&key, lease, wait) {
            Ok(l) => try_line(id, l.map(|l| l.detach())),
            Err(e) => err_line(id, &e),
        },
        "release" => {
            let Some(token) = token_of(cmd) else {
                return simple_err(id, "invalid", "token must be a decimal string");
            };
            match client.release(&key, token) {
                Ok(()) => ok_line(id, Map::new()),
                Err(e) => err_line(id, &e),
            }
        }
        _ => {
            let hold = ms(cmd, "hold_ms").unwrap_or_default();
            let fail = cmd.get("fail").and_then(Value::as_bool).unwrap_or(false);
            // with_lock's scope on the cancellable acquire (R11: a cancel
            // withdraws the waiting acquire); the guard's drop releases on
            // both the normal and the failing exit.
            let r = client.acquire_cancellable(&key, lease, wait, cancel).map(|guard| {
                std::thread::sleep(hold);
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
    let (c, g) = {
        let mut s = st.lock().unwrap();
        (s.client.take(), s.gen.take())
    };
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
            .unwrap_or(Err(Error::Closed))
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
        match serde_json::from_str::<Value>(&line) {
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
    // EOF: let pending commands finish (as the Go driver), then close the client.
    while tasks.join_next().await.is_some() {}
    close_client(&st).await;
    drop(out_tx);
    let _ = writer.await;
}
