//! Test helpers: a scripted fake server and the real `ticketing serve`.
#![allow(dead_code)]

use std::process::Stdio;
use std::time::Duration;

use ticketing::wire::{self, Code, Response, Status};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// How the fake server runs the handshake.
#[derive(Clone, Default)]
pub struct Mode {
    /// The token it proves (None: no tokens configured).
    pub token: Option<Vec<u8>>,
    /// Send a wrong server proof.
    pub impostor: bool,
    /// REJECT with this code instead of WELCOME.
    pub reject: Option<Code>,
    /// max_inflight of WELCOME (default 1024).
    pub max_inflight: Option<u32>,
    /// REJECT AUTH_FAILED every connection after the first this many.
    pub reject_after: Option<usize>,
}

/// One request received by the fake server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Req {
    pub op: u8,
    pub req_id: u32,
    pub arg: u64,
    pub key: Vec<u8>,
}

/// Controls one accepted connection.
#[derive(Clone)]
pub struct Ctl {
    pub conn: usize,
    tx: mpsc::UnboundedSender<Option<Vec<u8>>>,
}

impl Ctl {
    pub fn send(&self, r: Response<'_>) {
        let mut b = Vec::new();
        wire::append_response(&mut b, &r);
        let _ = self.tx.send(Some(b));
    }
    pub fn raw(&self, b: Vec<u8>) {
        let _ = self.tx.send(Some(b));
    }
    pub fn status(&self, req_id: u32, status: Status, code: Code) {
        self.send(resp(req_id, status, code, 0, 0, b""));
    }
    pub fn grant(&self, req_id: u32, token: u64, queued: u16) {
        self.send(resp(req_id, Status::Granted, Code::NONE, queued, token, b""));
    }
    /// Closes the connection.
    pub fn close(&self) {
        let _ = self.tx.send(None);
    }
}

pub fn resp<'a>(req_id: u32, status: Status, code: Code, queued: u16, value: u64, payload: &'a [u8]) -> Response<'a> {
    Response {
        status,
        code,
        queued,
        req_id,
        value,
        payload,
    }
}

pub enum Event {
    Connected(Ctl),
    /// A handshake this server rejected (connection number).
    Rejected(usize),
    Request(Req, Ctl),
}

pub struct Fake {
    pub addr: String,
    pub rx: mpsc::UnboundedReceiver<Event>,
}

impl Fake {
    pub async fn start(mode: Mode) -> Fake {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let (etx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut n = 0;
            while let Ok((s, _)) = l.accept().await {
                n += 1;
                tokio::spawn(serve(s, n, mode.clone(), etx.clone()));
            }
        });
        Fake { addr, rx }
    }

    /// The next request (skipping connection events), within 10 s.
    pub async fn next_req(&mut self) -> (Req, Ctl) {
        loop {
            match tokio::time::timeout(Duration::from_secs(10), self.rx.recv()).await {
                Ok(Some(Event::Request(r, c))) => return (r, c),
                Ok(Some(Event::Connected(_) | Event::Rejected(_))) => continue,
                Ok(None) => panic!("fake server gone"),
                Err(_) => panic!("no request within 10 s"),
            }
        }
    }

    /// The next event within `d`, if any.
    pub async fn try_next(&mut self, d: Duration) -> Option<Event> {
        tokio::time::timeout(d, self.rx.recv()).await.ok().flatten()
    }
}

async fn serve(mut s: tokio::net::TcpStream, n: usize, mode: Mode, etx: mpsc::UnboundedSender<Event>) {
    let mut nonce = [0u8; 32];
    nonce[0] = n as u8;
    let mut b = Vec::new();
    wire::append_hello(
        &mut b,
        &wire::Hello {
            flags: mode.token.is_some() as u8,
            nonce,
        },
    );
    if s.write_all(&b).await.is_err() {
        return;
    }
    let mut a = [0u8; wire::AUTH_LEN];
    if s.read_exact(&mut a).await.is_err() {
        return;
    }
    let auth = wire::parse_auth(&a).unwrap();
    let token = mode.token.clone().unwrap_or_default();
    let mut w = wire::Welcome {
        status: b'K',
        code: Code::NONE,
        max_inflight: mode.max_inflight.unwrap_or(1024),
        proof: [0; 32],
    };
    let reject = mode.reject.or(mode.reject_after.filter(|&k| n > k).map(|_| Code::AUTH_FAILED));
    if let Some(c) = reject {
        w = wire::Welcome {
            status: b'E',
            code: c,
            max_inflight: 0,
            proof: [0; 32],
        };
    } else if mode.token.is_some() && !wire::proof_eq(&auth.proof, &wire::client_proof(&token, auth.role, &nonce, &auth.nonce)) {
        w = wire::Welcome {
            status: b'E',
            code: Code::AUTH_FAILED,
            max_inflight: 0,
            proof: [0; 32],
        };
    } else {
        w.proof = wire::server_proof(&token, auth.role, &auth.nonce, &nonce);
        if mode.impostor {
            w.proof[0] ^= 1;
        }
    }
    let mut b = Vec::new();
    wire::append_welcome(&mut b, &w);
    let _ = s.write_all(&b).await;
    if !w.accepted() {
        let _ = etx.send(Event::Rejected(n));
        return;
    }
    let (tx, mut crx) = mpsc::unbounded_channel::<Option<Vec<u8>>>();
    let ctl = Ctl { conn: n, tx };
    let _ = etx.send(Event::Connected(ctl.clone()));
    let (mut rd, mut wr) = s.into_split();
    let reader = async {
        let mut h = [0u8; 16];
        loop {
            if rd.read_exact(&mut h).await.is_err() {
                return;
            }
            let len = if h[0] == b'Q' {
                u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize
            } else {
                h[1] as usize
            };
            let mut key = vec![0u8; len];
            if rd.read_exact(&mut key).await.is_err() {
                return;
            }
            let r = Req {
                op: h[0],
                req_id: u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
                arg: u64::from_be_bytes(h[8..16].try_into().unwrap()),
                key,
            };
            if r.op == b'P' {
                // A 1.0 server: a plain pong (features 0, protocol.md §12.1),
                // the client's handshake ping included.
                ctl.send(resp(r.req_id, Status::Pong, Code::NONE, 0, 1, b""));
                continue;
            }
            let _ = etx.send(Event::Request(r, ctl.clone()));
        }
    };
    let writer = async {
        while let Some(m) = crx.recv().await {
            match m {
                Some(b) => {
                    if wr.write_all(&b).await.is_err() {
                        return;
                    }
                }
                None => return,
            }
        }
    };
    tokio::select! {
        _ = reader => {}
        _ = writer => {}
    }
}

/// A real `ticketing serve` on an OS-chosen port, killed on drop.
pub struct Server {
    pub addr: String,
    child: tokio::process::Child,
    _dir: Option<TempDir>,
}

pub struct TempDir(pub std::path::PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn bin() -> String {
    std::env::var("TICKETING_BIN").unwrap_or_else(|_| {
        let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bin/ticketing");
        p.to_string()
    })
}

impl Server {
    pub async fn start(token: Option<&str>, extra: &[&str]) -> Server {
        let bin = bin();
        assert!(
            std::path::Path::new(&bin).exists(),
            "server binary {bin} not found: set TICKETING_BIN"
        );
        let mut cmd = tokio::process::Command::new(&bin);
        cmd.args(["serve", "--listen", "127.0.0.1:0"]).args(extra);
        let mut dir = None;
        if let Some(t) = token {
            let d = std::env::temp_dir().join(format!("tk-rust-{}-{}", std::process::id(), rand_suffix()));
            std::fs::create_dir_all(&d).unwrap();
            let f = d.join("token");
            std::fs::write(&f, t).unwrap();
            cmd.arg("--token-file").arg(&f);
            dir = Some(TempDir(d));
        }
        cmd.stderr(Stdio::piped()).stdout(Stdio::null()).kill_on_drop(true);
        let mut child = cmd.spawn().expect("start ticketing serve");
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let addr = tokio::time::timeout(Duration::from_secs(20), async {
            while let Ok(Some(l)) = lines.next_line().await {
                if l.contains("msg=serving") {
                    if let Some(a) = l.split_whitespace().find_map(|f| f.strip_prefix("addr=")) {
                        return a.to_string();
                    }
                }
            }
            panic!("server exited before serving");
        })
        .await
        .expect("server did not start");
        // Keep draining its log so that it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Server { addr, child, _dir: dir }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

fn rand_suffix() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

/// Bounds a test (a hanging test is a failing test, issue 31's runner gap):
/// when the guard is not dropped within `d`, the whole test binary exits 101
/// naming the test. Every test takes one: `let _w = common::watchdog("name", 60s)`.
/// The default bound of one test.
pub const TEST_BOUND: Duration = Duration::from_secs(90);

pub struct Watchdog(Option<std::sync::mpsc::Sender<()>>);

pub fn watchdog(name: &'static str, d: Duration) -> Watchdog {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(d) {
            eprintln!("test {name} still running after {d:?}: failing the run");
            std::process::exit(101);
        }
    });
    Watchdog(Some(tx))
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}
