//! The Ticketing v1 wire codec (`docs/protocol.md`): fixed-offset decoders and
//! append-style encoders for every frame a client sends or receives.
//!
//! Decoders never panic on any input and never allocate: payloads alias the
//! input buffer. Every length a peer announces is bounded before it is used.
//!
//! ```
//! # #[cfg(feature = "unstable-wire")] {
//! use ticketing::wire::{self, Code, Status};
//!
//! let mut frame = Vec::new();
//! wire::append_acquire(&mut frame, 1, b"orders/42", 30_000, 5_000);
//! assert_eq!(frame.len(), 16 + 9);
//!
//! // A grant after 10 s in the queue (625 × 16 ms), token above 2^53.
//! let bytes = [0x47, 0, 0x02, 0x71, 0, 0, 0, 1, 0x18, 0xbc, 0xfe, 0x56, 0x80, 0, 0, 0x07];
//! let (r, used) = wire::parse_response(&bytes).unwrap().unwrap();
//! assert_eq!((r.status, r.code, r.req_id, used), (Status::Granted, Code::NONE, 1, 16));
//! assert_eq!(r.value, 0x18bcfe5680000007);
//! assert_eq!(wire::queued_duration(r.queued), std::time::Duration::from_secs(10));
//! // An incomplete frame asks for more bytes; garbage is an error, never a panic.
//! assert_eq!(wire::parse_response(&bytes[..10]), Ok(None));
//! assert!(wire::parse_response(&[0xff; 16]).is_err());
//! # }
//! ```
// Encoders and decoders the client itself does not use are for the fake
// servers of the tests (feature `unstable-wire`).
#![cfg_attr(not(feature = "unstable-wire"), allow(dead_code))]

use std::fmt;
use std::time::Duration;

/// HELLO length (server → client).
pub const HELLO_LEN: usize = 40;
/// AUTH length (client → server).
pub const AUTH_LEN: usize = 72;
/// WELCOME / REJECT length (server → client).
pub const WELCOME_LEN: usize = 40;
/// Request and response header length.
pub const HEADER_LEN: usize = 16;
/// Nonce length of HELLO and AUTH.
pub const NONCE_LEN: usize = 32;
/// HMAC-SHA256 proof length.
pub const PROOF_LEN: usize = 32;
/// Longest key of `A`, `R`, `C`.
pub const MAX_KEY_LEN: usize = 250;
/// Longest `Q` body.
pub const MAX_ADMIN_BODY: usize = 65_536;
/// Longest `M` payload (the leader's address).
pub const MAX_MOVED_PAYLOAD: usize = 255;
/// Longest `E` payload (a UTF-8 message).
pub const MAX_ERROR_PAYLOAD: usize = 1024;
/// Longest `J` payload (a JSON object).
pub const MAX_ADMIN_REPLY: usize = 16 << 20;
/// The only protocol version.
pub const VERSION: u8 = 1;
/// HELLO flag bit 0: tokens are configured.
pub const HELLO_FLAG_TOKENS: u8 = 0x01;
/// The unit of the `G` header's `queued` field.
pub const QUEUED_UNIT: Duration = Duration::from_millis(16);

const HELLO_MAGIC: &[u8; 4] = b"TKTS";
const AUTH_MAGIC: &[u8; 4] = b"TKTC";

/// A reason code (protocol.md §4). Unknown codes are kept as they came.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Code(pub u8);

impl Code {
    /// 0: no reason.
    pub const NONE: Code = Code(0);
    /// 1: the key's queue is full.
    pub const QUEUE_FULL: Code = Code(1);
    /// 2: a server-wide limit or this connection's `max_inflight`.
    pub const OVERLOADED: Code = Code(2);
    /// 3: cluster clock skew unverified or too large.
    pub const CLOCK_UNHEALTHY: Code = Code(3);
    /// 4: the server is draining.
    pub const SHUTTING_DOWN: Code = Code(4);
    /// 5: the cluster cannot commit.
    pub const NO_QUORUM: Code = Code(5);
    /// 10: malformed handshake.
    pub const BAD_HANDSHAKE: Code = Code(10);
    /// 11: wrong proof.
    pub const AUTH_FAILED: Code = Code(11);
    /// 20: unknown op.
    pub const BAD_OP: Code = Code(20);
    /// 21: invalid key.
    pub const BAD_KEY: Code = Code(21);
    /// 22: lease out of range.
    pub const BAD_LEASE: Code = Code(22);
    /// 23: wait out of range.
    pub const BAD_WAIT: Code = Code(23);
    /// 24: nonzero flags.
    pub const BAD_FLAGS: Code = Code(24);
    /// 25: req_id of an outstanding request.
    pub const DUPLICATE_REQ_ID: Code = Code(25);
    /// 26: bad admin query.
    pub const BAD_ADMIN: Code = Code(26);
    /// 27: the role may not do this.
    pub const NOT_PERMITTED: Code = Code(27);
    /// 28: server bug.
    pub const INTERNAL: Code = Code(28);
    /// 12: REJECT from a TLS listener to a plaintext client (§12.4).
    pub const TLS_REQUIRED: Code = Code(12);
    /// 29: a malformed key set (§12.2).
    pub const BAD_KEYSET: Code = Code(29);
    /// 30: a bad connection label (§12.3).
    pub const BAD_LABEL: Code = Code(30);

    /// The code's name in protocol.md §4, e.g. `QUEUE_FULL`; `None` when unknown.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "NONE",
            1 => "QUEUE_FULL",
            2 => "OVERLOADED",
            3 => "CLOCK_UNHEALTHY",
            4 => "SHUTTING_DOWN",
            5 => "NO_QUORUM",
            10 => "BAD_HANDSHAKE",
            11 => "AUTH_FAILED",
            20 => "BAD_OP",
            21 => "BAD_KEY",
            22 => "BAD_LEASE",
            23 => "BAD_WAIT",
            24 => "BAD_FLAGS",
            25 => "DUPLICATE_REQ_ID",
            26 => "BAD_ADMIN",
            27 => "NOT_PERMITTED",
            28 => "INTERNAL",
            12 => "TLS_REQUIRED",
            29 => "BAD_KEYSET",
            30 => "BAD_LABEL",
            _ => return None,
        })
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "CODE_{}", self.0),
        }
    }
}

impl fmt::Debug for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Code({}={})", self.0, self)
    }
}

/// Request operations (§2).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Op {
    /// `A`: acquire.
    Acquire = b'A' as isize,
    /// `R`: release.
    Release = b'R' as isize,
    /// `C`: cancel a queued acquire.
    Cancel = b'C' as isize,
    /// `P`: ping.
    Ping = b'P' as isize,
    /// `Q`: admin query.
    Query = b'Q' as isize,
    /// `S`: acquire a key set (§12.2).
    AcquireSet = b'S' as isize,
    /// `X`: release a key set (§12.2).
    ReleaseSet = b'X' as isize,
    /// `L`: set the connection label (§12.3).
    Label = b'L' as isize,
}

/// Response statuses (§3).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Status {
    /// `G`: granted; value = fencing token.
    Granted,
    /// `T`: timed out.
    Timeout,
    /// `B`: busy; code says why.
    Busy,
    /// `O`: released / withdrawn.
    Released,
    /// `N`: not holder.
    NotHolder,
    /// `M`: moved; payload = leader address.
    Moved,
    /// `U`: unknown outcome.
    Unknown,
    /// `E`: error; payload = message.
    Error,
    /// `P`: pong; value = server time in µs.
    Pong,
    /// `J`: admin reply; payload = JSON.
    Admin,
}

impl Status {
    /// Decodes a status byte.
    pub fn from_byte(b: u8) -> Option<Status> {
        Some(match b {
            b'G' => Status::Granted,
            b'T' => Status::Timeout,
            b'B' => Status::Busy,
            b'O' => Status::Released,
            b'N' => Status::NotHolder,
            b'M' => Status::Moved,
            b'U' => Status::Unknown,
            b'E' => Status::Error,
            b'P' => Status::Pong,
            b'J' => Status::Admin,
            _ => return None,
        })
    }

    /// The status byte.
    pub fn byte(self) -> u8 {
        match self {
            Status::Granted => b'G',
            Status::Timeout => b'T',
            Status::Busy => b'B',
            Status::Released => b'O',
            Status::NotHolder => b'N',
            Status::Moved => b'M',
            Status::Unknown => b'U',
            Status::Error => b'E',
            Status::Pong => b'P',
            Status::Admin => b'J',
        }
    }

    /// The largest payload of this status; `None` for statuses without one.
    pub fn max_payload(self) -> Option<usize> {
        match self {
            Status::Moved => Some(MAX_MOVED_PAYLOAD),
            Status::Error => Some(MAX_ERROR_PAYLOAD),
            Status::Admin => Some(MAX_ADMIN_REPLY),
            _ => None,
        }
    }

    /// Whether this status may answer `op` (§3).
    pub fn fits(self, op: Op) -> bool {
        use Status::*;
        if self == Error {
            return true;
        }
        match op {
            Op::Acquire | Op::AcquireSet => matches!(self, Granted | Timeout | Busy | Moved | Unknown),
            Op::Release | Op::Cancel | Op::ReleaseSet => matches!(self, Released | NotHolder | Moved | Unknown),
            Op::Label => self == Released,
            Op::Ping => self == Pong,
            Op::Query => matches!(self, Admin | Moved),
        }
    }
}

/// A decoding failure that makes the byte stream unusable.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum WireError {
    /// A fixed-size frame was given fewer bytes than its size.
    Short,
    /// Wrong magic.
    BadMagic,
    /// Unknown protocol version.
    BadVersion,
    /// Unknown role.
    BadRole,
    /// Nonzero reserved bytes.
    BadReserved,
    /// Unknown status byte.
    BadStatus(u8),
    /// A payload longer than its status allows.
    PayloadTooLarge,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Short => f.write_str("short frame"),
            WireError::BadMagic => f.write_str("bad magic"),
            WireError::BadVersion => f.write_str("unknown protocol version"),
            WireError::BadRole => f.write_str("unknown role"),
            WireError::BadReserved => f.write_str("nonzero reserved bytes"),
            WireError::BadStatus(b) => write!(f, "unknown status byte 0x{b:02x}"),
            WireError::PayloadTooLarge => f.write_str("response payload above its limit"),
        }
    }
}

impl std::error::Error for WireError {}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// HELLO (§1.1).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Hello {
    /// Flags; bit 0 = tokens configured.
    pub flags: u8,
    /// server_nonce.
    pub nonce: [u8; NONCE_LEN],
}

impl Hello {
    /// HELLO flag bit 0.
    pub fn tokens_configured(&self) -> bool {
        self.flags & HELLO_FLAG_TOKENS != 0
    }
}

/// Appends a HELLO frame.
pub fn append_hello(b: &mut Vec<u8>, h: &Hello) {
    b.extend_from_slice(HELLO_MAGIC);
    b.extend_from_slice(&[VERSION, h.flags, 0, 0]);
    b.extend_from_slice(&h.nonce);
}

/// Decodes HELLO from the first 40 bytes of `b`.
pub fn parse_hello(b: &[u8]) -> Result<Hello, WireError> {
    if b.len() < HELLO_LEN {
        return Err(WireError::Short);
    }
    if &b[0..4] != HELLO_MAGIC {
        return Err(WireError::BadMagic);
    }
    if b[4] != VERSION {
        return Err(WireError::BadVersion);
    }
    if b[5] & !HELLO_FLAG_TOKENS != 0 || b[6] != 0 || b[7] != 0 {
        return Err(WireError::BadReserved);
    }
    let mut nonce = [0u8; NONCE_LEN];
    nonce.copy_from_slice(&b[8..40]);
    Ok(Hello { flags: b[5], nonce })
}

/// AUTH (§1.2).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Auth {
    /// Role byte: 1 client, 2 admin, 3 peer.
    pub role: u8,
    /// client_nonce.
    pub nonce: [u8; NONCE_LEN],
    /// client_proof.
    pub proof: [u8; PROOF_LEN],
}

/// Appends an AUTH frame.
pub fn append_auth(b: &mut Vec<u8>, a: &Auth) {
    b.extend_from_slice(AUTH_MAGIC);
    b.extend_from_slice(&[VERSION, a.role, 0, 0]);
    b.extend_from_slice(&a.nonce);
    b.extend_from_slice(&a.proof);
}

/// Decodes AUTH from the first 72 bytes of `b` (magic, version, role, reserved).
pub fn parse_auth(b: &[u8]) -> Result<Auth, WireError> {
    if b.len() < AUTH_LEN {
        return Err(WireError::Short);
    }
    if &b[0..4] != AUTH_MAGIC {
        return Err(WireError::BadMagic);
    }
    if b[4] != VERSION {
        return Err(WireError::BadVersion);
    }
    if !(1..=3).contains(&b[5]) {
        return Err(WireError::BadRole);
    }
    if b[6] != 0 || b[7] != 0 {
        return Err(WireError::BadReserved);
    }
    let mut a = Auth {
        role: b[5],
        nonce: [0; NONCE_LEN],
        proof: [0; PROOF_LEN],
    };
    a.nonce.copy_from_slice(&b[8..40]);
    a.proof.copy_from_slice(&b[40..72]);
    Ok(a)
}

/// WELCOME (`K`) or REJECT (`E`) (§1.3).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Welcome {
    /// `b'K'` accepted or `b'E'` rejected.
    pub status: u8,
    /// Reject code; 0 when accepted.
    pub code: Code,
    /// Outstanding acquires allowed on this connection.
    pub max_inflight: u32,
    /// server_proof (zeros in a REJECT).
    pub proof: [u8; PROOF_LEN],
}

impl Welcome {
    /// Whether this is a WELCOME.
    pub fn accepted(&self) -> bool {
        self.status == b'K'
    }
}

/// Appends a WELCOME/REJECT frame.
pub fn append_welcome(b: &mut Vec<u8>, w: &Welcome) {
    b.extend_from_slice(&[w.status, w.code.0, 0, 0]);
    b.extend_from_slice(&w.max_inflight.to_be_bytes());
    b.extend_from_slice(&w.proof);
}

/// Decodes WELCOME/REJECT from the first 40 bytes of `b`.
pub fn parse_welcome(b: &[u8]) -> Result<Welcome, WireError> {
    if b.len() < WELCOME_LEN {
        return Err(WireError::Short);
    }
    if b[0] != b'K' && b[0] != b'E' {
        return Err(WireError::BadStatus(b[0]));
    }
    if b[2] != 0 || b[3] != 0 {
        return Err(WireError::BadReserved);
    }
    let mut proof = [0u8; PROOF_LEN];
    proof.copy_from_slice(&b[8..40]);
    Ok(Welcome {
        status: b[0],
        code: Code(b[1]),
        max_inflight: be32(&b[4..8]),
        proof,
    })
}

fn proof(token: &[u8], label: &[u8], role: u8, first: &[u8; 32], second: &[u8; 32]) -> [u8; 32] {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, token);
    let mut ctx = ring::hmac::Context::with_key(&key);
    ctx.update(label);
    ctx.update(&[role]);
    ctx.update(first);
    ctx.update(second);
    let tag = ctx.sign();
    let mut out = [0u8; 32];
    out.copy_from_slice(tag.as_ref());
    out
}

/// client_proof = HMAC-SHA256(token, "ticketing-v1-client" ‖ role ‖ server_nonce ‖ client_nonce).
pub fn client_proof(token: &[u8], role: u8, server_nonce: &[u8; 32], client_nonce: &[u8; 32]) -> [u8; 32] {
    proof(token, b"ticketing-v1-client", role, server_nonce, client_nonce)
}

/// server_proof = HMAC-SHA256(token, "ticketing-v1-server" ‖ role ‖ client_nonce ‖ server_nonce).
pub fn server_proof(token: &[u8], role: u8, client_nonce: &[u8; 32], server_nonce: &[u8; 32]) -> [u8; 32] {
    proof(token, b"ticketing-v1-server", role, client_nonce, server_nonce)
}

/// Compares two proofs in constant time.
pub fn proof_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    // ring's verify_slices_are_equal is constant time in the contents.
    #[allow(deprecated)]
    ring::constant_time::verify_slices_are_equal(a, b).is_ok()
}

fn append_header(b: &mut Vec<u8>, op: Op, key_len: u8, req_id: u32, arg: u64) {
    b.extend_from_slice(&[op as u8, key_len, 0, 0]);
    b.extend_from_slice(&req_id.to_be_bytes());
    b.extend_from_slice(&arg.to_be_bytes());
}

/// Appends an acquire (the caller checked the key: 1..=250 bytes).
pub fn append_acquire(b: &mut Vec<u8>, req_id: u32, key: &[u8], lease_ms: u32, wait_ms: u32) {
    append_header(b, Op::Acquire, key.len() as u8, req_id, (lease_ms as u64) << 32 | wait_ms as u64);
    b.extend_from_slice(key);
}

/// Appends a release.
pub fn append_release(b: &mut Vec<u8>, req_id: u32, key: &[u8], token: u64) {
    append_header(b, Op::Release, key.len() as u8, req_id, token);
    b.extend_from_slice(key);
}

/// Appends a cancel of this connection's queued acquire `target` on `key`.
pub fn append_cancel(b: &mut Vec<u8>, req_id: u32, key: &[u8], target: u32) {
    append_header(b, Op::Cancel, key.len() as u8, req_id, (target as u64) << 32);
    b.extend_from_slice(key);
}

/// Appends a ping.
pub fn append_ping(b: &mut Vec<u8>, req_id: u32) {
    append_header(b, Op::Ping, 0, req_id, 0);
}

/// The ping arg asking a 1.1 server for its feature bits (§12.1).
pub const PING_FEATURES: u64 = 1;
/// Feature bit: `S` and `X` accepted (§12.1).
pub const FEATURE_KEY_SETS: u16 = 0x0001;
/// Feature bit: `L` accepted, labels shown in `locks`.
pub const FEATURE_LABELS: u16 = 0x0002;
/// Feature bit: the TLS listener sends REJECT TLS_REQUIRED (informational).
pub const FEATURE_TLS_HINT: u16 = 0x0004;
/// Keys in a set: 2..=16 (§12.2).
pub const MIN_SET_KEYS: usize = 2;
/// Keys in a set: 2..=16 (§12.2).
pub const MAX_SET_KEYS: usize = 16;
/// The longest label (§12.3).
pub const MAX_LABEL_LEN: usize = 64;

/// Appends the feature ping (§12.1): `P` with arg 1; the pong's `queued`
/// field carries the feature bits.
pub fn append_ping_features(b: &mut Vec<u8>, req_id: u32) {
    append_header(b, Op::Ping, 0, req_id, PING_FEATURES);
}

/// The body of `S`/`X` (§12.2): each key as key_len (u8) ‖ key, in order
/// (the caller checked 2..=16 valid keys).
pub fn set_body<K: AsRef<[u8]>>(keys: &[K]) -> Vec<u8> {
    let mut b = Vec::with_capacity(keys.iter().map(|k| k.as_ref().len() + 1).sum());
    for k in keys {
        b.push(k.as_ref().len() as u8);
        b.extend_from_slice(k.as_ref());
    }
    b
}

/// The keys of a set body made by [`set_body`].
pub fn set_keys(body: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = body;
    std::iter::from_fn(move || {
        let (&n, tail) = rest.split_first()?;
        let n = (n as usize).min(tail.len());
        let (k, t) = tail.split_at(n);
        rest = t;
        Some(k)
    })
}

fn append_set(b: &mut Vec<u8>, op: Op, req_id: u32, body: &[u8], arg: u64) {
    let count = set_keys(body).count() as u8;
    b.push(op as u8);
    b.push(count);
    b.extend_from_slice(&(body.len() as u16).to_be_bytes());
    b.extend_from_slice(&req_id.to_be_bytes());
    b.extend_from_slice(&arg.to_be_bytes());
    b.extend_from_slice(body);
}

/// Appends `S`: acquire the set whose [`set_body`] is `body`.
pub fn append_acquire_set(b: &mut Vec<u8>, req_id: u32, body: &[u8], lease_ms: u32, wait_ms: u32) {
    append_set(b, Op::AcquireSet, req_id, body, (lease_ms as u64) << 32 | wait_ms as u64);
}

/// Appends `X`: release the set whose [`set_body`] is `body`.
pub fn append_release_set(b: &mut Vec<u8>, req_id: u32, body: &[u8], token: u64) {
    append_set(b, Op::ReleaseSet, req_id, body, token);
}

/// Appends `L` (§12.3; the caller keeps the label at 0..=64 bytes).
pub fn append_label(b: &mut Vec<u8>, req_id: u32, label: &[u8]) {
    append_header(b, Op::Label, label.len() as u8, req_id, 0);
    b.extend_from_slice(label);
}

/// Whether the 40 bytes where a plaintext client expects HELLO are the
/// REJECT TLS_REQUIRED of a TLS listener (§12.4).
pub fn is_tls_required(b: &[u8]) -> bool {
    b.len() >= 2 && b[0] == b'E' && b[1] == Code::TLS_REQUIRED.0
}

/// Appends an admin query (the caller keeps the body at 1..=65,536 bytes).
pub fn append_query(b: &mut Vec<u8>, req_id: u32, body: &[u8]) {
    append_header(b, Op::Query, 0, req_id, (body.len() as u64) << 32);
    b.extend_from_slice(body);
}

/// A decoded response (§3). `payload` aliases the input.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Response<'a> {
    /// Status.
    pub status: Status,
    /// Reason code.
    pub code: Code,
    /// `G`: time waited in the queue, in 16 ms units.
    pub queued: u16,
    /// The request's req_id.
    pub req_id: u32,
    /// `G` token, `P` server µs, `M E J` payload length.
    pub value: u64,
    /// `M E J` payload.
    pub payload: &'a [u8],
}

/// Appends a response (for tests and fake servers): the payload length is
/// written into `value` for `M E J`.
pub fn append_response(b: &mut Vec<u8>, r: &Response<'_>) {
    let value = if r.status.max_payload().is_some() {
        r.payload.len() as u64
    } else {
        r.value
    };
    b.extend_from_slice(&[r.status.byte(), r.code.0]);
    b.extend_from_slice(&r.queued.to_be_bytes());
    b.extend_from_slice(&r.req_id.to_be_bytes());
    b.extend_from_slice(&value.to_be_bytes());
    if r.status.max_payload().is_some() {
        b.extend_from_slice(r.payload);
    }
}

/// Decodes one response from the start of `b`. `Ok(None)`: incomplete, read
/// more. Errors are fatal to the stream.
pub fn parse_response(b: &[u8]) -> Result<Option<(Response<'_>, usize)>, WireError> {
    if b.len() < HEADER_LEN {
        return Ok(None);
    }
    let status = Status::from_byte(b[0]).ok_or(WireError::BadStatus(b[0]))?;
    let mut r = Response {
        status,
        code: Code(b[1]),
        queued: be16(&b[2..4]),
        req_id: be32(&b[4..8]),
        value: be64(&b[8..16]),
        payload: &[],
    };
    let Some(max) = status.max_payload() else {
        return Ok(Some((r, HEADER_LEN)));
    };
    if r.value > max as u64 {
        return Err(WireError::PayloadTooLarge);
    }
    let n = HEADER_LEN + r.value as usize;
    if b.len() < n {
        return Ok(None);
    }
    r.payload = &b[HEADER_LEN..n];
    Ok(Some((r, n)))
}

/// The full length of the response starting `b`, as far as its header tells
/// (16 while the header is incomplete or invalid).
pub fn response_frame_len(b: &[u8]) -> usize {
    if b.len() < HEADER_LEN {
        return HEADER_LEN;
    }
    match Status::from_byte(b[0]).and_then(Status::max_payload) {
        Some(max) => {
            let v = be64(&b[8..16]);
            if v > max as u64 {
                HEADER_LEN
            } else {
                HEADER_LEN + v as usize
            }
        }
        None => HEADER_LEN,
    }
}

/// Whether `k` is a valid key (§2.1 check 5): 1..=250 bytes of UTF-8 with no
/// control characters (U+0000–U+001F, U+007F–U+009F).
pub fn valid_key(k: &[u8]) -> bool {
    if k.is_empty() || k.len() > MAX_KEY_LEN {
        return false;
    }
    match std::str::from_utf8(k) {
        Ok(s) => !s.chars().any(|c| (c as u32) < 0x20 || (0x7f..=0x9f).contains(&(c as u32))),
        Err(_) => false,
    }
}

/// The `queued` field as a duration (a lower bound of the real wait).
pub fn queued_duration(q: u16) -> Duration {
    QUEUED_UNIT * q as u32
}
