//! The client's own logic against a scripted fake server (issue 33 P4 /
//! issue 36 item 10): what the testkit scenarios check for every language
//! (busy_not_retried, moved_followed, moved_hop_limit, cancel_queued,
//! cancel_race_compensated, two_connections, r2_silent_server,
//! r4_wrong_token_fast, r8_bad_input_unsent, garbage, release_retry_bounded,
//! drop_reply_indeterminate, auth_impostor, close_pending,
//! deadline_after_queue) runs there, not here.

mod common;

use std::time::Duration;

use common::{resp, Fake, Mode};
use ticketing::wire::{Code, Status};
use ticketing::{Client, Config, ErrorKind};

const S: Duration = Duration::from_secs(1);

fn cfg(addr: &str) -> ticketing::ConfigBuilder {
    Config::builder().addr(addr).connect_timeout(Duration::from_secs(2))
}

async fn client(f: &Fake) -> Client {
    Client::connect(cfg(&f.addr).build().unwrap()).await.unwrap()
}

#[tokio::test]
async fn reject_overloaded_is_busy() {
    let _w = common::watchdog("reject_overloaded_is_busy", common::TEST_BOUND);
    let f = Fake::start(Mode {
        reject: Some(Code::OVERLOADED),
        ..Mode::default()
    })
    .await;
    let e = Client::connect(
        Config::builder()
            .addr(&f.addr)
            .connect_timeout(Duration::from_millis(400))
            .build()
            .unwrap(),
    )
    .await
    .unwrap_err();
    assert_eq!(e, ErrorKind::Busy(Code::OVERLOADED));
}

#[tokio::test]
async fn connect_timeout_names_the_cause() {
    let _w = common::watchdog("connect_timeout_names_the_cause", common::TEST_BOUND);
    // A port nobody listens on.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    drop(l);
    let e = Client::connect(
        Config::builder()
            .addr(&addr)
            .connect_timeout(Duration::from_millis(300))
            .build()
            .unwrap(),
    )
    .await
    .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Connect(_)), "{e:?}");
    // The io error underneath is kept as the source (issue 33 finding 2).
    let src = std::error::Error::source(&e).unwrap_or_else(|| panic!("no source: {e:?}"));
    let io = src
        .downcast_ref::<std::io::Error>()
        .unwrap_or_else(|| panic!("not an io error: {src:?}"));
    assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);
}

#[tokio::test]
async fn server_errors_keep_their_code() {
    let _w = common::watchdog("server_errors_keep_their_code", common::TEST_BOUND);
    let mut f = Fake::start(Mode::default()).await;
    let c = client(&f).await;
    let a = tokio::spawn({
        let c = c.clone();
        async move { c.acquire("k", S, S).await }
    });
    let (r, ctl) = f.next_req().await;
    ctl.send(resp(r.req_id, Status::Error, Code::BAD_LEASE, 0, 0, b"lease too long"));
    let e = a.await.unwrap().unwrap_err();
    assert_eq!(e.code(), Some(Code::BAD_LEASE));
    assert!(matches!(e.kind(), ErrorKind::Invalid(_)));
    c.close().await;
}

#[tokio::test]
async fn unknown_outcome_is_indeterminate() {
    let _w = common::watchdog("unknown_outcome_is_indeterminate", common::TEST_BOUND);
    let mut f = Fake::start(Mode::default()).await;
    let c = client(&f).await;
    let a = tokio::spawn({
        let c = c.clone();
        async move { c.acquire("k", S, S).await }
    });
    let (r, ctl) = f.next_req().await;
    ctl.status(r.req_id, Status::Unknown, Code::NO_QUORUM);
    assert_eq!(a.await.unwrap().unwrap_err(), ErrorKind::Indeterminate);
    c.close().await;
}

#[tokio::test]
async fn duplicate_req_id_error_does_not_complete_the_request() {
    let _w = common::watchdog("duplicate_req_id_error_does_not_complete_the_request", common::TEST_BOUND);
    let mut f = Fake::start(Mode::default()).await;
    let c = client(&f).await;
    let a = tokio::spawn({
        let c = c.clone();
        async move { c.acquire("k", S, S).await }
    });
    let (r, ctl) = f.next_req().await;
    ctl.send(resp(r.req_id, Status::Error, Code::DUPLICATE_REQ_ID, 0, 0, b"dup"));
    ctl.send(resp(9999, Status::Granted, Code::NONE, 0, 5, b"")); // unknown req_id: ignored
    ctl.grant(r.req_id, 77, 0);
    let l = a.await.unwrap().unwrap();
    assert_eq!(l.token(), 77);
    let _ = l.detach();
    c.close().await;
}

#[tokio::test]
async fn dropped_lease_is_released_in_the_background() {
    let _w = common::watchdog("dropped_lease_is_released_in_the_background", common::TEST_BOUND);
    let mut f = Fake::start(Mode::default()).await;
    let c = client(&f).await;
    let a = tokio::spawn({
        let c = c.clone();
        async move { c.acquire("d", S, S).await }
    });
    let (r, ctl) = f.next_req().await;
    ctl.grant(r.req_id, 5, 0);
    let l = a.await.unwrap().unwrap();
    drop(l);
    let (rr, ctl) = f.next_req().await;
    assert_eq!((rr.op, rr.arg, rr.key.as_slice()), (b'R', 5, &b"d"[..]));
    ctl.status(rr.req_id, Status::Released, Code::NONE);
    c.drain().await;
    c.close().await;
}

#[tokio::test]
async fn pipelining_out_of_order_answers() {
    let _w = common::watchdog("pipelining_out_of_order_answers", common::TEST_BOUND);
    let mut f = Fake::start(Mode::default()).await;
    let c = client(&f).await;
    let mut tasks = Vec::new();
    for i in 0..100 {
        let c = c.clone();
        tasks.push(tokio::spawn(
            async move { c.acquire(format!("p/{i}"), S, S).await.map(|l| l.detach()) },
        ));
    }
    let mut reqs = Vec::new();
    for _ in 0..100 {
        reqs.push(f.next_req().await);
    }
    // Answer in reverse order; each gets the token derived from its key.
    for (r, ctl) in reqs.iter().rev() {
        let i: u64 = std::str::from_utf8(&r.key[2..]).unwrap().parse().unwrap();
        ctl.grant(r.req_id, 1000 + i, 0);
    }
    for (i, t) in tasks.into_iter().enumerate() {
        assert_eq!(t.await.unwrap().unwrap(), 1000 + i as u64);
    }
    c.close().await;
}

#[tokio::test]
async fn reconnects_after_loss_and_stays_usable() {
    let _w = common::watchdog("reconnects_after_loss_and_stays_usable", common::TEST_BOUND);
    let mut f = Fake::start(Mode::default()).await;
    let c = client(&f).await;
    // Kill every connection once, then wait for both to be back.
    let mut seen = 0;
    while seen < 4 {
        match f.try_next(Duration::from_secs(5)).await {
            Some(common::Event::Connected(ctl)) => {
                seen += 1;
                if ctl.conn <= 2 {
                    ctl.close();
                }
            }
            Some(common::Event::Request(..) | common::Event::Rejected(_)) => {}
            None => panic!("no reconnect"),
        }
    }
    // Wait for the client to notice the reconnection.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let a = tokio::spawn({
        let c = c.clone();
        async move { c.acquire("k", S, Duration::from_secs(3)).await }
    });
    let (r, ctl) = f.next_req().await;
    ctl.grant(r.req_id, 3, 0);
    assert_eq!(a.await.unwrap().unwrap().detach(), 3);
    c.close().await;
}

#[tokio::test]
async fn max_inflight_waits_for_a_slot_within_the_wait() {
    let _w = common::watchdog("max_inflight_waits_for_a_slot_within_the_wait", common::TEST_BOUND);
    let mut f = Fake::start(Mode {
        max_inflight: Some(1),
        ..Mode::default()
    })
    .await;
    let c = client(&f).await;
    // Two connections with one slot each: the third queued acquire waits client-side.
    let mut tasks = Vec::new();
    for i in 0..3 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            c.acquire(format!("m{i}"), S, Duration::from_millis(400)).await
        }));
    }
    let (r1, c1) = f.next_req().await;
    let (r2, c2) = f.next_req().await;
    assert!(
        f.try_next(Duration::from_millis(100)).await.is_none(),
        "third sent beyond max_inflight"
    );
    c1.grant(r1.req_id, 1, 0);
    let (r3, c3) = f.next_req().await;
    c3.grant(r3.req_id, 3, 0);
    c2.status(r2.req_id, Status::Timeout, Code::NONE);
    let mut timeouts = 0;
    for t in tasks {
        match t.await.unwrap().map_err(|e| e.kind().clone()) {
            Ok(l) => {
                let _ = l.detach();
            }
            Err(ErrorKind::Timeout) | Err(ErrorKind::Closed) => timeouts += 1,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(timeouts, 1);
    c.close().await;
}

#[tokio::test]
async fn lease_expiring_and_detach() {
    let _w = common::watchdog("lease_expiring_and_detach", common::TEST_BOUND);
    let mut f = Fake::start(Mode::default()).await;
    let c = client(&f).await;
    let a = tokio::spawn({
        let c = c.clone();
        async move { c.acquire("e", Duration::from_millis(300), S).await }
    });
    let (r, ctl) = f.next_req().await;
    ctl.grant(r.req_id, 11, 0);
    let l = a.await.unwrap().unwrap();
    assert!(l.remaining() <= Duration::from_millis(300));
    let t = std::time::Instant::now();
    l.expiring(Duration::from_millis(100)).await;
    assert!(t.elapsed() <= Duration::from_millis(300));
    assert!(std::time::Instant::now() + Duration::from_millis(100) >= l.deadline());
    // Detached: dropping it sends nothing.
    assert_eq!(l.detach(), 11);
    assert!(f.try_next(Duration::from_millis(150)).await.is_none());
    c.close().await;
}

/// R2: an acquire written to a silent server (SIGSTOPped, or one that never
/// answers) ends Indeterminate at its wait plus the answer allowance counted
/// from its write, and is withdrawn with C.

#[tokio::test]
async fn key_sets_against_a_1_0_server_are_unsupported_and_unsent() {
    let _w = common::watchdog("key_sets_against_a_1_0_server_are_unsupported_and_unsent", common::TEST_BOUND);
    // The fake answers the feature ping with a plain pong (features 0): 1.0.
    let mut f = Fake::start(Mode::default()).await;
    let c = client(&f).await;
    let e = c.acquire_set(&["a", "b"], S, S).await.unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Unsupported(_)), "{e:?}");
    assert!(e.to_string().contains("a,b") && e.to_string().contains(&f.addr), "{e}");
    let e = c.release_set(&["a", "b"], 7).await.unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Unsupported(_)), "{e:?}");
    // Bad sets are refused before anything else.
    for keys in [&["a"][..], &["a", "a"][..]] {
        let e = c.acquire_set(keys, S, S).await.unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Invalid(_)), "{keys:?}: {e:?}");
    }
    loop {
        match f.try_next(Duration::from_millis(300)).await {
            Some(common::Event::Request(r, _)) => panic!("sent {:?} to a 1.0 server", r.op as char),
            Some(_) => {}
            None => break,
        }
    }
}
