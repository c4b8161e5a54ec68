//! Integration tests against the real `ticketing serve` ($TICKETING_BIN).

mod common;

use std::time::Duration;

use common::Server;
use ticketing::{Client, Config, Error, ErrorKind};

const S: Duration = Duration::from_secs(1);

async fn connect(s: &Server, token: Option<&str>) -> Result<Client, Error> {
    let mut b = Config::builder().addr(&s.addr).connect_timeout(Duration::from_secs(3));
    if let Some(t) = token {
        b = b.token(t);
    }
    Client::connect(b.build()?).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_release_fencing_and_try_once() {
    let _w = common::watchdog("acquire_release_fencing_and_try_once", common::TEST_BOUND);
    let s = Server::start(None, &[]).await;
    let c = connect(&s, None).await.unwrap();
    let l = c.acquire("it/a", Duration::from_secs(10), S).await.unwrap();
    assert!(l.token() > 1 << 53, "tokens are unix_ms * 2^20: {}", l.token());
    assert!(l.remaining() > Duration::from_secs(9));
    assert_eq!(l.key(), b"it/a");
    assert!(c.try_acquire("it/a", S).await.unwrap().is_none(), "wait 0 on a held key");
    let t1 = l.token();
    l.release().await.unwrap();
    let l2 = c.try_acquire("it/a", S).await.unwrap().expect("free again");
    assert!(l2.token() > t1, "strictly increasing tokens");
    let t2 = l2.token();
    l2.release().await.unwrap();
    assert_eq!(c.release("it/a", t2).await.unwrap_err(), ErrorKind::NotHolder);
    // The server's limits come back typed with their code.
    let e = c.acquire("it/x", Duration::from_secs(7200), S).await.unwrap_err();
    assert_eq!(e.code(), Some(ticketing::Code::BAD_LEASE), "{e:?}");
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_handoff_and_expiry() {
    let _w = common::watchdog("fifo_handoff_and_expiry", common::TEST_BOUND);
    let s = Server::start(None, &[]).await;
    let c = connect(&s, None).await.unwrap();
    let holder = c.acquire("it/fifo", Duration::from_millis(600), S).await.unwrap();
    let mut waiters = Vec::new();
    for i in 0..5 {
        let c = c.clone();
        waiters.push(tokio::spawn(async move {
            let l = c
                .acquire("it/fifo", Duration::from_millis(300), Duration::from_secs(20))
                .await
                .unwrap();
            let t = l.token();
            l.release().await.unwrap();
            (i, t)
        }));
        tokio::time::sleep(Duration::from_millis(30)).await; // arrival order
    }
    // The holder never releases: its lease expiry hands the key to the first waiter.
    let t0 = holder.detach();
    let mut last = t0;
    for w in waiters {
        let (_, t) = w.await.unwrap();
        assert!(t > last, "FIFO with increasing tokens");
        last = t;
    }
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waiter_leaves_the_queue() {
    let _w = common::watchdog("cancelled_waiter_leaves_the_queue", common::TEST_BOUND);
    let s = Server::start(None, &[]).await;
    let c = connect(&s, None).await.unwrap();
    let holder = c.acquire("it/cancel", Duration::from_secs(30), S).await.unwrap();
    // A waiter that gives up (its future is dropped by the timeout).
    let r = tokio::time::timeout(
        Duration::from_millis(200),
        c.acquire("it/cancel", Duration::from_secs(30), Duration::from_secs(20)),
    )
    .await;
    assert!(r.is_err());
    c.drain().await;
    // A second waiter queues behind; when the holder releases it gets the
    // key at once (the cancelled one was withdrawn, not granted).
    let c2 = c.clone();
    let w = tokio::spawn(async move { c2.acquire("it/cancel", Duration::from_secs(5), Duration::from_secs(5)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    holder.release().await.unwrap();
    let l = tokio::time::timeout(Duration::from_secs(3), w)
        .await
        .expect("granted promptly")
        .unwrap()
        .unwrap();
    l.release().await.unwrap();
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_lease_is_released_and_with_lock_releases() {
    let _w = common::watchdog("dropped_lease_is_released_and_with_lock_releases", common::TEST_BOUND);
    let s = Server::start(None, &[]).await;
    let c = connect(&s, None).await.unwrap();
    drop(c.acquire("it/drop", Duration::from_secs(30), S).await.unwrap());
    let l = c.acquire("it/drop", Duration::from_secs(30), Duration::from_secs(3)).await.unwrap();
    l.release().await.unwrap();
    let r: Result<u64, u64> = c
        .with_lock("it/wl", Duration::from_secs(30), S, async |l| Err(l.token()))
        .await
        .unwrap();
    assert!(r.is_err());
    assert!(
        c.try_acquire("it/wl", S).await.unwrap().is_some_and(|l| l.detach() > 0),
        "released after a failing scope"
    );
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_in_flight() {
    let _w = common::watchdog("hundred_in_flight", common::TEST_BOUND);
    let s = Server::start(None, &[]).await;
    let c = connect(&s, None).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..100 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let l = c
                .acquire(format!("it/many/{}", i % 10), Duration::from_secs(10), Duration::from_secs(30))
                .await?;
            l.release().await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_auth() {
    let _w = common::watchdog("token_auth", common::TEST_BOUND);
    let s = Server::start(Some("s3cret"), &[]).await;
    let c = connect(&s, Some("s3cret")).await.unwrap();
    c.try_acquire("it/auth", S).await.unwrap().unwrap().release().await.unwrap();
    c.close().await;
    assert_eq!(
        connect(&s, Some("wrong")).await.unwrap_err(),
        ErrorKind::Auth(Some(ticketing::Code::AUTH_FAILED))
    );
    assert_eq!(
        connect(&s, None).await.unwrap_err(),
        ErrorKind::Auth(Some(ticketing::Code::AUTH_FAILED))
    );
}

#[test]
fn blocking_client() {
    let _w = common::watchdog("blocking_client", common::TEST_BOUND);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let s = rt.block_on(Server::start(None, &[]));
    let c = ticketing::blocking::Client::connect(Config::builder().addr(&s.addr).build().unwrap()).unwrap();
    let l = c.acquire("it/blocking", Duration::from_secs(10), S).unwrap();
    assert!(c.try_acquire("it/blocking", S).unwrap().is_none());
    // Released from another thread: ownership is the token.
    std::thread::spawn(move || l.release().unwrap()).join().unwrap();
    let t = c.with_lock("it/blocking", Duration::from_secs(10), S, |l| l.token()).unwrap();
    assert!(t > 0);
    assert!(c.try_acquire("it/blocking", S).unwrap().is_some());
    // Works when called from inside a runtime too (it never uses the caller's).
    let c2 = c.clone();
    rt.block_on(async move { c2.try_acquire("it/blocking2", S).unwrap().unwrap().release().unwrap() });
    c.close();
    drop(s);
}
