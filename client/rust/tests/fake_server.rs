//! Failure paths against a scripted fake server.

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
async fn bad_arguments_fail_before_sending() {
    let _w = common::watchdog("bad_arguments_fail_before_sending", common::TEST_BOUND);
    let f = Fake::start(Mode::default()).await;
    let c = client(&f).await;
    let long = vec![b'k'; 251];
    for (key, lease, wait) in [
        (&b""[..], S, S),
        (&long[..], S, S),
        (b"a\nb", S, S),
        (b"\xc2\x85", S, S), // U+0085, a C1 control
        (b"\xff", S, S),
        (b"k", Duration::ZERO, S),
        (b"k", Duration::from_millis(u32::MAX as u64 + 1), S),
        (b"k", S, Duration::from_millis(u32::MAX as u64 + 1)),
    ] {
        let e = c.acquire(key, lease, wait).await.unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Invalid(i) if i.code.is_none()), "{key:?}: {e:?}");
    }
    assert!(matches!(
        c.release(b"", 1).await.map_err(|e| e.kind().clone()),
        Err(ErrorKind::Invalid(_))
    ));
    assert!(
        matches!(c.release(b"k", 0).await.map_err(|e| e.kind().clone()), Err(ErrorKind::Invalid(_))),
        "R8: token 0 refused"
    );
    assert!(Config::builder().build().is_err());
    assert!(Config::builder().addr("nohost").build().is_err());
    c.close().await;
}

#[tokio::test]
async fn two_connections_for_one_address() {
    let _w = common::watchdog("two_connections_for_one_address", common::TEST_BOUND);
    let mut f = Fake::start(Mode::default()).await;
    let c = client(&f).await;
    let mut conns = std::collections::HashSet::new();
    let t = tokio::time::Instant::now();
    while conns.len() < 2 && t.elapsed() < Duration::from_secs(5) {
        if let Some(common::Event::Connected(ctl)) = f.try_next(Duration::from_secs(5)).await {
            conns.insert(ctl.conn);
        }
    }
    assert_eq!(conns.len(), 2);
    c.close().await;
}

#[tokio::test]
async fn impostor_and_reject_are_auth_errors() {
    let _w = common::watchdog("impostor_and_reject_are_auth_errors", common::TEST_BOUND);
    let f = Fake::start(Mode {
        token: Some(b"s3cret".to_vec()),
        impostor: true,
        ..Mode::default()
    })
    .await;
    let e = Client::connect(cfg(&f.addr).token("s3cret").build().unwrap()).await.unwrap_err();
    assert_eq!(e, ErrorKind::Auth(None));
    let f = Fake::start(Mode {
        token: Some(b"s3cret".to_vec()),
        ..Mode::default()
    })
    .await;
    let e = Client::connect(cfg(&f.addr).token("wrong").build().unwrap()).await.unwrap_err();
    assert_eq!(e, ErrorKind::Auth(Some(Code::AUTH_FAILED)));
    assert_eq!(e.code(), Some(Code::AUTH_FAILED));
    let f = Fake::start(Mode {
        token: Some(b"s3cret".to_vec()),
        ..Mode::default()
    })
    .await;
    let c = Client::connect(cfg(&f.addr).token("s3cret").build().unwrap()).await.unwrap();
    c.close().await;
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
}

#[tokio::test]
async fn grant_deadline_uses_queued_time() {
    let _w = common::watchdog("grant_deadline_uses_queued_time", common::TEST_BOUND);
    let mut f = Fake::start(Mode::default()).await;
    let c = client(&f).await;
    let before = std::time::Instant::now();
    let a = tokio::spawn({
        let c = c.clone();
        async move { c.acquire("k", Duration::from_secs(10), Duration::from_secs(5)).await }
    });
    let (r, ctl) = f.next_req().await;
    assert_eq!(r.op, b'A');
    assert_eq!(r.arg, (10_000u64 << 32) | 5000);
    assert_eq!(r.key, b"k");
    let token = (1u64 << 60) + 12345; // above 2^53: exact
    ctl.grant(r.req_id, token, 625); // queued 10 s
    let l = a.await.unwrap().unwrap();
    assert_eq!(l.token(), token);
    let d = l.deadline() - before;
    assert!(d >= Duration::from_secs(19) && d <= Duration::from_secs(21), "{d:?}");
    let _ = l.detach();
    c.close().await;
}

#[tokio::test]
async fn busy_is_returned_at_once_and_not_retried() {
    let _w = common::watchdog("busy_is_returned_at_once_and_not_retried", common::TEST_BOUND);
    let mut f = Fake::start(Mode::default()).await;
    let c = client(&f).await;
    let a = tokio::spawn({
        let c = c.clone();
        async move { c.acquire("k", S, S).await }
    });
    let (r, ctl) = f.next_req().await;
    ctl.status(r.req_id, Status::Busy, Code::QUEUE_FULL);
    assert_eq!(a.await.unwrap().unwrap_err(), ErrorKind::Busy(Code::QUEUE_FULL));
    assert!(f.try_next(Duration::from_millis(200)).await.is_none(), "B was retried");
    c.close().await;
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
async fn lost_connection_after_send_is_indeterminate_never_retried() {
    let _w = common::watchdog("lost_connection_after_send_is_indeterminate_never_retried", common::TEST_BOUND);
    let mut f = Fake::start(Mode::default()).await;
    let c = client(&f).await;
    let a = tokio::spawn({
        let c = c.clone();
        async move { c.acquire("k", S, Duration::from_secs(3)).await }
    });
    let (r, ctl) = f.next_req().await;
    assert_eq!(r.op, b'A');
    ctl.close();
    assert_eq!(a.await.unwrap().unwrap_err(), ErrorKind::Indeterminate);
    // Never retried: no further acquire arrives.
    loop {
        match f.try_next(Duration::from_millis(300)).await {
            Some(common::Event::Request(r, _)) => panic!("unexpected request {r:?}"),
            Some(common::Event::Connected(_) | common::Event::Rejected(_)) => continue,
            None => break,
        }
    }
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
async fn protocol_violation_drops_the_connection() {
    let _w = common::watchdog("protocol_violation_drops_the_connection", common::TEST_BOUND);
    let mut f = Fake::start(Mode::default()).await;
    let c = client(&f).await;
    let a = tokio::spawn({
        let c = c.clone();
        async move { c.acquire("k", S, S).await }
    });
    let (_r, ctl) = f.next_req().await;
    ctl.raw(vec![b'Z'; 16]); // not a status
    assert_eq!(a.await.unwrap().unwrap_err(), ErrorKind::Indeterminate);
    // An oversized payload announcement is refused too, without allocating it.
    let a = tokio::spawn({
        let c = c.clone();
        async move { c.acquire("k2", S, S).await }
    });
    let (_r, ctl) = f.next_req().await;
    let mut b = vec![b'J', 0, 0, 0, 0, 0, 0, 1];
    b.extend_from_slice(&u64::MAX.to_be_bytes());
    ctl.raw(b);
    assert_eq!(a.await.unwrap().unwrap_err(), ErrorKind::Indeterminate);
    c.close().await;
}

#[tokio::test]
async fn moved_is_followed_to_the_leader() {
    let _w = common::watchdog("moved_is_followed_to_the_leader", common::TEST_BOUND);
    let mut leader = Fake::start(Mode::default()).await;
    let mut follower = Fake::start(Mode::default()).await;
    let c = client(&follower).await;
    let a = tokio::spawn({
        let c = c.clone();
        async move { c.acquire("k", S, Duration::from_secs(3)).await }
    });
    let (r, ctl) = follower.next_req().await;
    ctl.send(resp(r.req_id, Status::Moved, Code::NONE, 0, 0, leader.addr.as_bytes()));
    let (r2, ctl2) = leader.next_req().await;
    assert_eq!(r2.op, b'A');
    assert!((r2.arg as u32) <= 3000, "the retry carries the remaining wait");
    ctl2.grant(r2.req_id, 42, 0);
    assert_eq!(a.await.unwrap().unwrap().detach(), 42);
    c.close().await;
}

#[tokio::test]
async fn moved_loop_is_bounded() {
    let _w = common::watchdog("moved_loop_is_bounded", common::TEST_BOUND);
    let mut f = Fake::start(Mode::default()).await;
    let c = client(&f).await;
    let a = tokio::spawn({
        let c = c.clone();
        async move { c.acquire("k", S, Duration::ZERO).await }
    });
    let mut n = 0;
    let addr = f.addr.clone();
    loop {
        tokio::select! {
            (r, ctl) = f.next_req() => {
                n += 1;
                ctl.send(resp(r.req_id, Status::Moved, Code::NONE, 0, 0, addr.as_bytes()));
            }
            _ = async { while !a.is_finished() { tokio::time::sleep(Duration::from_millis(5)).await; } } => break,
        }
    }
    assert_eq!(a.await.unwrap().unwrap_err(), ErrorKind::NoLeader);
    assert_eq!(n, 4, "hop limit 3, then give up (wait 0)");
    c.close().await;
}

#[tokio::test]
async fn dropping_a_queued_acquire_sends_cancel() {
    let _w = common::watchdog("dropping_a_queued_acquire_sends_cancel", common::TEST_BOUND);
    let mut f = Fake::start(Mode::default()).await;
    let c = client(&f).await;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let c2 = c.clone();
    let t = tokio::spawn(async move {
        tokio::select! {
            _ = c2.acquire("q", S, Duration::from_secs(10)) => panic!("should be cancelled"),
            _ = rx => {}
        }
    });
    let (r, ctl) = f.next_req().await;
    assert_eq!(r.op, b'A');
    tx.send(()).unwrap();
    t.await.unwrap();
    let (cr, _) = f.next_req().await;
    assert_eq!(cr.op, b'C');
    assert_eq!((cr.arg >> 32) as u32, r.req_id);
    assert_eq!(cr.key, b"q");
    // The server withdraws it: T then O. Nothing else happens.
    ctl.status(r.req_id, Status::Timeout, Code::NONE);
    ctl.status(cr.req_id, Status::Released, Code::NONE);
    assert!(f.try_next(Duration::from_millis(200)).await.is_none());
    c.drain().await;
    c.close().await;
}

#[tokio::test]
async fn grant_that_wins_the_cancel_race_is_compensated() {
    let _w = common::watchdog("grant_that_wins_the_cancel_race_is_compensated", common::TEST_BOUND);
    let mut f = Fake::start(Mode::default()).await;
    let c = client(&f).await;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let c2 = c.clone();
    let t = tokio::spawn(async move {
        tokio::select! {
            _ = c2.acquire("q", S, Duration::from_secs(10)) => panic!("should be cancelled"),
            _ = rx => {}
        }
    });
    let (r, ctl) = f.next_req().await;
    tx.send(()).unwrap();
    t.await.unwrap();
    let (cr, _) = f.next_req().await;
    assert_eq!(cr.op, b'C');
    ctl.grant(r.req_id, 9001, 0);
    ctl.status(cr.req_id, Status::NotHolder, Code::NONE);
    let (rr, ctl2) = f.next_req().await;
    assert_eq!(rr.op, b'R', "compensation releases the grant");
    assert_eq!(rr.arg, 9001);
    assert_eq!(rr.key, b"q");
    ctl2.status(rr.req_id, Status::Released, Code::NONE);
    c.drain().await;
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
async fn release_is_retried_and_never_success_without_o() {
    let _w = common::watchdog("release_is_retried_and_never_success_without_o", common::TEST_BOUND);
    let mut f = Fake::start(Mode::default()).await;
    let c = Client::connect(
        cfg(&f.addr)
            .release_window(Duration::from_millis(1500))
            .backoff(Duration::from_millis(20), Duration::from_millis(40))
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let t = tokio::spawn({
        let c = c.clone();
        async move { c.release("r", 7).await }
    });
    // Every attempt loses its connection: retried within the window, then Indeterminate.
    let mut attempts = 0;
    let started = std::time::Instant::now();
    while !t.is_finished() {
        if let Some(common::Event::Request(r, ctl)) = f.try_next(Duration::from_millis(100)).await {
            assert_eq!((r.op, r.arg), (b'R', 7));
            attempts += 1;
            ctl.close();
        }
    }
    assert_eq!(t.await.unwrap().unwrap_err(), ErrorKind::Indeterminate);
    assert!(attempts >= 2, "attempts {attempts}");
    assert!(started.elapsed() < Duration::from_secs(4));
    // After a lost attempt, N is indeterminate (the lost one may have released it).
    let t = tokio::spawn({
        let c = c.clone();
        async move { c.release("r", 8).await }
    });
    let (r, ctl) = f.next_req().await;
    ctl.close();
    let (r2, ctl) = f.next_req().await;
    assert_eq!(r2.arg, r.arg);
    ctl.status(r2.req_id, Status::NotHolder, Code::NONE);
    assert_eq!(t.await.unwrap().unwrap_err(), ErrorKind::Indeterminate);
    // A clean N is NotHolder.
    let t = tokio::spawn({
        let c = c.clone();
        async move { c.release("r", 9).await }
    });
    let (r, ctl) = f.next_req().await;
    ctl.status(r.req_id, Status::NotHolder, Code::NONE);
    assert_eq!(t.await.unwrap().unwrap_err(), ErrorKind::NotHolder);
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
async fn close_fails_pending_calls() {
    let _w = common::watchdog("close_fails_pending_calls", common::TEST_BOUND);
    let mut f = Fake::start(Mode::default()).await;
    let c = client(&f).await;
    let a = tokio::spawn({
        let c = c.clone();
        async move { c.acquire("k", S, Duration::from_secs(10)).await }
    });
    let _ = f.next_req().await;
    c.close().await;
    assert_eq!(a.await.unwrap().unwrap_err(), ErrorKind::Closed);
    assert_eq!(c.acquire("k", S, S).await.unwrap_err(), ErrorKind::Closed);
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
async fn silent_server_acquire_ends_indeterminate_and_is_withdrawn() {
    let _w = common::watchdog("silent_server_acquire_ends_indeterminate_and_is_withdrawn", Duration::from_secs(60));
    let mut f = Fake::start(Mode::default()).await;
    let c = Client::connect(cfg(&f.addr).answer_allowance(Duration::from_millis(500)).build().unwrap())
        .await
        .unwrap();
    let t = std::time::Instant::now();
    let a = tokio::spawn({
        let c = c.clone();
        async move { c.acquire("silent", S, Duration::from_millis(300)).await }
    });
    let (r, _ctl) = f.next_req().await;
    assert_eq!(r.op, b'A');
    // Never answered.
    let (cr, _) = f.next_req().await;
    assert_eq!(cr.op, b'C', "withdrawn");
    assert_eq!((cr.arg >> 32) as u32, r.req_id);
    let e = tokio::time::timeout(Duration::from_secs(20), a)
        .await
        .expect("acquire still pending")
        .unwrap();
    assert_eq!(e.unwrap_err(), ErrorKind::Indeterminate);
    assert!(
        t.elapsed() >= Duration::from_millis(800),
        "not before wait + allowance: {:?}",
        t.elapsed()
    );
    // Try-once (wait 0) too: bounded by the allowance alone.
    let a = tokio::spawn({
        let c = c.clone();
        async move { c.acquire("silent0", S, Duration::ZERO).await }
    });
    let (r, _ctl) = f.next_req().await;
    assert_eq!(r.op, b'A');
    let e = tokio::time::timeout(Duration::from_secs(20), a)
        .await
        .expect("try-once still pending")
        .unwrap();
    assert_eq!(e.unwrap_err(), ErrorKind::Indeterminate);
    assert_eq!(ticketing::DEFAULT_ANSWER_ALLOWANCE, Duration::from_secs(3));
    c.close().await;
}

/// R4: once the connections are down and the server answers REJECT
/// AUTH_FAILED (a rotated token), an acquire waiting for a connection fails
/// with Auth at once, not after its wait or the connect timeout.
#[tokio::test]
async fn rejected_credentials_fail_a_waiting_acquire_fast() {
    let _w = common::watchdog("rejected_credentials_fail_a_waiting_acquire_fast", common::TEST_BOUND);
    let mut f = Fake::start(Mode {
        reject_after: Some(2),
        ..Mode::default()
    })
    .await;
    let c = Client::connect(
        cfg(&f.addr)
            .connect_timeout(Duration::from_secs(5))
            .backoff(Duration::from_millis(20), Duration::from_millis(40))
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    // Both connections up, then cut: every reconnect is rejected.
    let mut ctls = Vec::new();
    while ctls.len() < 2 {
        match f.try_next(Duration::from_secs(10)).await {
            Some(common::Event::Connected(ctl)) => ctls.push(ctl),
            Some(_) => {}
            None => panic!("the client did not open two connections"),
        }
    }
    for ctl in &ctls {
        ctl.close();
    }
    // Wait until both connections' reconnects were rejected (both are down).
    let mut rejected = std::collections::HashSet::new();
    while rejected.len() < 2 {
        match f.try_next(Duration::from_secs(10)).await {
            Some(common::Event::Rejected(n)) => {
                rejected.insert(n);
            }
            Some(_) => {}
            None => panic!("no rejected reconnects"),
        }
    }
    let t = std::time::Instant::now();
    let e = c.acquire("k", S, Duration::from_secs(8)).await.unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Auth(Some(Code::AUTH_FAILED))), "{e:?}");
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "took {:?}: not the 5 s connect budget",
        t.elapsed()
    );
    c.close().await;
}
