//! The golden vectors of client/wire/testdata/golden, read from the repo:
//! each decodes to the values in its comments and re-encodes byte for byte.

use std::path::PathBuf;

use ticketing::wire::{self, Code, Response, Status};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../wire/testdata/golden")
}

fn load(name: &str) -> Vec<u8> {
    let text = std::fs::read_to_string(dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut digits = String::new();
    for line in text.lines() {
        let l = line.split('#').next().unwrap();
        digits.extend(l.chars().filter(|c| !c.is_whitespace()));
    }
    assert!(digits.len() % 2 == 0, "{name}: odd number of hex digits");
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap())
        .collect()
}

fn seq(start: u8) -> [u8; 32] {
    std::array::from_fn(|i| start + i as u8)
}

const SERVER_NONCE: u8 = 0x00;
const CLIENT_NONCE: u8 = 0x20;

#[test]
fn every_file_is_covered() {
    let mut names: Vec<String> = std::fs::read_dir(dir())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".hex"))
        .collect();
    names.sort();
    for n in &names {
        assert!(COVERED.contains(&n.as_str()), "golden file {n} has no test here");
    }
    assert!(names.len() >= 36, "only {} golden files", names.len());
}

const COVERED: &[&str] = &[
    "auth_admin.hex",
    "auth_client.hex",
    "auth_client_notoken.hex",
    "auth_peer.hex",
    "hello_flags0.hex",
    "hello_flags1.hex",
    "reject_auth_failed.hex",
    "reject_bad_handshake.hex",
    "reject_overloaded.hex",
    "reject_shutting_down.hex",
    "req_acquire.hex",
    "req_acquire_try.hex",
    "req_acquire_utf8.hex",
    "req_cancel.hex",
    "req_ping.hex",
    "req_query.hex",
    "req_release.hex",
    "resp_admin.hex",
    "resp_busy_clock_unhealthy.hex",
    "resp_busy_no_quorum.hex",
    "resp_busy_overloaded.hex",
    "resp_busy_queue_full.hex",
    "resp_busy_shutting_down.hex",
    "resp_error.hex",
    "resp_error_empty.hex",
    "resp_granted.hex",
    "resp_granted_queued.hex",
    "resp_moved.hex",
    "resp_moved_empty.hex",
    "resp_not_holder.hex",
    "resp_pong.hex",
    "resp_released.hex",
    "resp_timeout.hex",
    "resp_unknown.hex",
    "resp_unknown_no_quorum.hex",
    "welcome_admin.hex",
    "welcome_client.hex",
    "welcome_client_notoken.hex",
    "welcome_peer.hex",
];

#[test]
fn hello() {
    for (name, flags) in [("hello_flags0.hex", 0), ("hello_flags1.hex", 1)] {
        let b = load(name);
        let h = wire::parse_hello(&b).unwrap();
        assert_eq!(h.flags, flags);
        assert_eq!(h.tokens_configured(), flags == 1);
        assert_eq!(h.nonce, seq(SERVER_NONCE));
        let mut out = Vec::new();
        wire::append_hello(&mut out, &h);
        assert_eq!(out, b, "{name}");
    }
}

#[test]
fn auth_proofs() {
    for (name, role, token) in [
        ("auth_client.hex", 1u8, &b"s3cret"[..]),
        ("auth_admin.hex", 2, b"s3cret"),
        ("auth_peer.hex", 3, b"s3cret"),
        ("auth_client_notoken.hex", 1, b""),
    ] {
        let b = load(name);
        let a = wire::parse_auth(&b).unwrap();
        assert_eq!(a.role, role, "{name}");
        assert_eq!(a.nonce, seq(CLIENT_NONCE));
        let want = wire::client_proof(token, role, &seq(SERVER_NONCE), &seq(CLIENT_NONCE));
        assert_eq!(a.proof, want, "{name}: client proof");
        let mut out = Vec::new();
        wire::append_auth(
            &mut out,
            &wire::Auth {
                role,
                nonce: seq(CLIENT_NONCE),
                proof: want,
            },
        );
        assert_eq!(out, b, "{name}");
    }
}

#[test]
fn welcome_proofs() {
    for (name, role, token, mi) in [
        ("welcome_client.hex", 1u8, &b"s3cret"[..], 1024u32),
        ("welcome_admin.hex", 2, b"s3cret", 1024),
        ("welcome_peer.hex", 3, b"s3cret", 1),
        ("welcome_client_notoken.hex", 1, b"", 1024),
    ] {
        let b = load(name);
        let w = wire::parse_welcome(&b).unwrap();
        assert!(w.accepted(), "{name}");
        assert_eq!(w.code, Code::NONE);
        assert_eq!(w.max_inflight, mi, "{name}");
        let want = wire::server_proof(token, role, &seq(CLIENT_NONCE), &seq(SERVER_NONCE));
        assert!(wire::proof_eq(&w.proof, &want), "{name}: server proof");
        let mut out = Vec::new();
        wire::append_welcome(
            &mut out,
            &wire::Welcome {
                status: b'K',
                code: Code::NONE,
                max_inflight: mi,
                proof: want,
            },
        );
        assert_eq!(out, b, "{name}");
    }
}

#[test]
fn rejects() {
    for (name, code) in [
        ("reject_auth_failed.hex", Code::AUTH_FAILED),
        ("reject_bad_handshake.hex", Code::BAD_HANDSHAKE),
        ("reject_overloaded.hex", Code::OVERLOADED),
        ("reject_shutting_down.hex", Code::SHUTTING_DOWN),
    ] {
        let b = load(name);
        let w = wire::parse_welcome(&b).unwrap();
        assert!(!w.accepted());
        assert_eq!(w.code, code, "{name}");
        assert_eq!(w.max_inflight, 0);
        assert_eq!(w.proof, [0; 32]);
        let mut out = Vec::new();
        wire::append_welcome(&mut out, &w);
        assert_eq!(out, b, "{name}");
    }
}

#[test]
fn requests() {
    let mut out = Vec::new();
    wire::append_acquire(&mut out, 1, b"orders/42", 30000, 5000);
    assert_eq!(out, load("req_acquire.hex"));
    out.clear();
    wire::append_acquire(&mut out, 2, b"job", 3_600_000, 0);
    assert_eq!(out, load("req_acquire_try.hex"));
    out.clear();
    let key = "clé/🔒".as_bytes();
    assert!(wire::valid_key(key));
    wire::append_acquire(&mut out, 0xcafebabe, key, 1000, 900_000);
    assert_eq!(out, load("req_acquire_utf8.hex"));
    out.clear();
    wire::append_release(&mut out, 3, b"orders/42", 1_700_000_000_000u64 * (1 << 20) + 5);
    assert_eq!(out, load("req_release.hex"));
    out.clear();
    wire::append_cancel(&mut out, 4, b"orders/42", 1);
    assert_eq!(out, load("req_cancel.hex"));
    out.clear();
    wire::append_ping(&mut out, 5);
    assert_eq!(out, load("req_ping.hex"));
    out.clear();
    wire::append_query(&mut out, 6, br#"{"cmd":"status"}"#);
    assert_eq!(out, load("req_query.hex"));
}

#[test]
#[allow(clippy::type_complexity)]
fn responses() {
    let t = |low: u64| 1_700_000_000_000u64 * (1 << 20) + low;
    let cases: Vec<(&str, Status, Code, u16, u32, u64, &[u8])> = vec![
        ("resp_granted.hex", Status::Granted, Code::NONE, 0, 1, t(1), b""),
        ("resp_granted_queued.hex", Status::Granted, Code::NONE, 625, 0xcafebabe, t(7), b""),
        ("resp_timeout.hex", Status::Timeout, Code::NONE, 0, 2, 0, b""),
        ("resp_busy_queue_full.hex", Status::Busy, Code::QUEUE_FULL, 0, 7, 0, b""),
        ("resp_busy_overloaded.hex", Status::Busy, Code::OVERLOADED, 0, 8, 0, b""),
        ("resp_busy_clock_unhealthy.hex", Status::Busy, Code::CLOCK_UNHEALTHY, 0, 9, 0, b""),
        ("resp_busy_shutting_down.hex", Status::Busy, Code::SHUTTING_DOWN, 0, 10, 0, b""),
        ("resp_busy_no_quorum.hex", Status::Busy, Code::NO_QUORUM, 0, 11, 0, b""),
        ("resp_released.hex", Status::Released, Code::NONE, 0, 3, 0, b""),
        ("resp_not_holder.hex", Status::NotHolder, Code::NONE, 0, 4, 0, b""),
        ("resp_moved.hex", Status::Moved, Code::NONE, 0, 1, 13, b"10.0.0.2:7001"),
        ("resp_moved_empty.hex", Status::Moved, Code::NONE, 0, 2, 0, b""),
        ("resp_unknown.hex", Status::Unknown, Code::NONE, 0, 12, 0, b""),
        ("resp_unknown_no_quorum.hex", Status::Unknown, Code::NO_QUORUM, 0, 13, 0, b""),
        ("resp_error.hex", Status::Error, Code::BAD_KEY, 0, 14, 22, b"key is not valid UTF-8"),
        ("resp_error_empty.hex", Status::Error, Code::NOT_PERMITTED, 0, 6, 0, b""),
        ("resp_pong.hex", Status::Pong, Code::NONE, 0, 5, 1_700_000_000_123_456, b""),
        (
            "resp_admin.hex",
            Status::Admin,
            Code::NONE,
            0,
            6,
            28,
            br#"{"unix_us":1700000000123456}"#,
        ),
    ];
    for (name, status, code, queued, req_id, value, payload) in cases {
        let b = load(name);
        let (r, n) = wire::parse_response(&b).unwrap().unwrap();
        assert_eq!(n, b.len(), "{name}");
        let want = Response {
            status,
            code,
            queued,
            req_id,
            value,
            payload,
        };
        assert_eq!(r, want, "{name}");
        // Byte by byte: every proper prefix is incomplete, never an error.
        for i in 0..b.len() {
            assert_eq!(wire::parse_response(&b[..i]).unwrap(), None, "{name} prefix {i}");
        }
        let mut out = Vec::new();
        wire::append_response(&mut out, &want);
        assert_eq!(out, b, "{name}");
    }
    assert_eq!(wire::queued_duration(625), std::time::Duration::from_secs(10));
}

// Protocol 1.1 (protocol.md §12.6): client/wire/testdata/golden/v1_1/.

fn load11(name: &str) -> Vec<u8> {
    load(&format!("v1_1/{name}"))
}

#[test]
fn v1_1_every_file_is_covered() {
    let mut names: Vec<String> = std::fs::read_dir(dir().join("v1_1"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".hex"))
        .collect();
    names.sort();
    assert_eq!(names, COVERED_1_1, "every v1_1 golden file has a test here");
}

const COVERED_1_1: &[&str] = &[
    "reject_tls_required.hex",
    "req_acquire_set.hex",
    "req_acquire_set_try.hex",
    "req_cancel_set.hex",
    "req_label.hex",
    "req_ping_features.hex",
    "req_release_set.hex",
    "resp_error_bad_keyset.hex",
    "resp_error_bad_label.hex",
    "resp_label_ok.hex",
    "resp_pong_features.hex",
];

#[test]
fn v1_1_requests_encode_byte_for_byte() {
    let mut b = Vec::new();
    wire::append_ping_features(&mut b, 9);
    assert_eq!(b, load11("req_ping_features.hex"));

    let set = wire::set_body(&["acct/17", "acct/42"]);
    b.clear();
    wire::append_acquire_set(&mut b, 0x0a, &set, 30_000, 5_000);
    assert_eq!(b, load11("req_acquire_set.hex"));

    b.clear();
    wire::append_acquire_set(&mut b, 0x10, &wire::set_body(&["jobs", "tables", "queue1"]), 10_000, 0);
    assert_eq!(b, load11("req_acquire_set_try.hex"));

    b.clear();
    wire::append_release_set(&mut b, 0x0b, &set, 0x18bc_fe56_8000_0009);
    assert_eq!(b, load11("req_release_set.hex"));

    // A queued set is withdrawn by its first key as sent in the S.
    let first = wire::set_keys(&set).next().unwrap();
    assert_eq!(first, b"acct/17");
    b.clear();
    wire::append_cancel(&mut b, 0x0c, first, 0x0a);
    assert_eq!(b, load11("req_cancel_set.hex"));

    b.clear();
    wire::append_label(&mut b, 0x0d, b"web-1/4242 go/1.1.0");
    assert_eq!(b, load11("req_label.hex"));

    let three = wire::set_body(&["jobs", "tables", "queue1"]);
    let keys: Vec<&[u8]> = wire::set_keys(&three).collect();
    assert_eq!(keys, [&b"jobs"[..], b"tables", b"queue1"]);
}

#[test]
fn v1_1_responses_decode_and_reencode() {
    type Case = (&'static str, Status, Code, u16, u32, u64, &'static [u8]);
    let cases: &[Case] = &[
        (
            "resp_pong_features.hex",
            Status::Pong,
            Code::NONE,
            0x0007,
            9,
            0x0006_0a24_1820_2240,
            b"",
        ),
        ("resp_label_ok.hex", Status::Released, Code::NONE, 0, 0x0d, 0, b""),
        ("resp_error_bad_label.hex", Status::Error, Code::BAD_LABEL, 0, 0x0d, 0, b""),
        (
            "resp_error_bad_keyset.hex",
            Status::Error,
            Code::BAD_KEYSET,
            0,
            0x0a,
            20,
            b"duplicate key in set",
        ),
    ];
    for &(name, status, code, queued, req_id, value, payload) in cases {
        let bytes = load11(name);
        let (r, n) = wire::parse_response(&bytes)
            .unwrap()
            .unwrap_or_else(|| panic!("{name}: incomplete"));
        assert_eq!(n, bytes.len(), "{name}");
        assert_eq!(
            (r.status, r.code, r.queued, r.req_id, r.value, r.payload),
            (status, code, queued, req_id, value, payload),
            "{name}"
        );
        let mut out = Vec::new();
        wire::append_response(&mut out, &r);
        assert_eq!(out, bytes, "{name}: re-encoded");
    }
    assert_eq!(wire::FEATURE_KEY_SETS | wire::FEATURE_LABELS | wire::FEATURE_TLS_HINT, 0x0007);
    assert_eq!(Code::BAD_KEYSET.to_string(), "BAD_KEYSET");
    assert_eq!(Code::BAD_LABEL.to_string(), "BAD_LABEL");
}

#[test]
fn v1_1_reject_tls_required() {
    let b = load11("reject_tls_required.hex");
    assert_eq!(b.len(), wire::HELLO_LEN, "40 bytes where a plaintext client reads HELLO");
    assert!(wire::is_tls_required(&b));
    assert!(!wire::is_tls_required(&load("hello_flags0.hex")));
    assert_eq!(Code::TLS_REQUIRED.to_string(), "TLS_REQUIRED");
}
