//! The blocking client at the edges: fork (R9) and scope exit (R10), against
//! the real `ticketing serve` ($TICKETING_BIN).

mod common;

use std::time::{Duration, Instant};

use common::{watchdog, Server};
use ticketing::blocking::Client;
use ticketing::{Config, ErrorKind};

const S: Duration = Duration::from_secs(1);
const BOUND: Duration = Duration::from_secs(60);

/// A server on a runtime of its own (its log is drained there).
fn server() -> (tokio::runtime::Runtime, Server) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let s = rt.block_on(Server::start(None, &[]));
    (rt, s)
}

fn connect(s: &Server) -> Client {
    Client::connect(
        Config::builder()
            .addr(&s.addr)
            .connect_timeout(Duration::from_secs(3))
            .build()
            .unwrap(),
    )
    .unwrap()
}

/// Waits for `pid` to exit within `d`; kills it (and fails) otherwise.
fn reap(pid: libc::pid_t, d: Duration) -> i32 {
    let end = Instant::now() + d;
    loop {
        let mut status = 0;
        // SAFETY: waitpid on our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            assert!(libc::WIFEXITED(status), "child died by a signal: {status}");
            return libc::WEXITSTATUS(status);
        }
        if Instant::now() >= end {
            // SAFETY: our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            panic!("forked child still running after {d:?}: the blocking client hangs after fork (R9)");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// R9: in a forked child the parent's blocking client fails with Closed at
/// once (acquire, release, a lease's release and drop), never touches the
/// parent's lock, and never hangs.
#[test]
fn forked_child_gets_closed_and_never_hangs() {
    let _w = watchdog("forked_child_gets_closed_and_never_hangs", BOUND);
    let (_rt, s) = server();
    let c = connect(&s);
    let held = c.acquire("fork/held", Duration::from_secs(30), S).unwrap();
    let dropped = c.acquire("fork/dropped", Duration::from_secs(30), S).unwrap();
    // SAFETY: the child only calls the client (which checks its pid first) and _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let mut code = 0;
        if c.acquire("fork/child", Duration::from_secs(30), S).err().map(|e| e.kind().clone()) != Some(ErrorKind::Closed) {
            code |= 1;
        }
        if c.release("fork/held", held.token()).err().map(|e| e.kind().clone()) != Some(ErrorKind::Closed) {
            code |= 2;
        }
        if c.try_acquire("fork/child", S).err().map(|e| e.kind().clone()) != Some(ErrorKind::Closed) {
            code |= 4;
        }
        drop(dropped); // must neither release the parent's lock nor hang
                       // SAFETY: leave without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    assert_eq!(reap(pid, Duration::from_secs(20)), 0, "the child's calls were not all Closed");
    // The parent's locks are untouched by the child.
    held.release().expect("the parent still holds fork/held");
    let dropped_token = dropped.token();
    c.release("fork/dropped", dropped_token)
        .expect("the child's drop did not release the parent's lock");
    std::mem::forget(dropped); // released above
    c.close();
}

/// R10: a blocking guard that goes out of scope releases the lock before
/// the scope is left: the key is free the moment the drop returns, also when
/// the drop is the last thing a program does (checked across processes).
#[test]
fn guard_dropped_at_the_end_of_main_releases() {
    let _w = watchdog("guard_dropped_at_the_end_of_main_releases", BOUND);
    if let Ok(addr) = std::env::var("TK_RUST_R10_CHILD") {
        // The child "program": take the lock, let the guard drop at the end.
        let c = Client::connect(Config::builder().addr(addr).build().unwrap()).unwrap();
        let guard = c.acquire("r10/exit", Duration::from_secs(30), S).unwrap();
        // The end of main: locals drop in reverse order, then the process exits.
        drop(guard);
        drop(c);
        std::process::exit(0);
    }
    let (_rt, s) = server();
    let st = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "guard_dropped_at_the_end_of_main_releases", "--test-threads=1", "-q"])
        .env("TK_RUST_R10_CHILD", &s.addr)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "child run failed: {st}");
    let c = connect(&s);
    let l = c.try_acquire("r10/exit", S).unwrap();
    assert!(l.is_some(), "the guard dropped at the end of the child's main kept the lock");
    // In one process too: free as soon as drop returns.
    let g = c.acquire("r10/scope", Duration::from_secs(30), S).unwrap();
    drop(g);
    let other = connect(&s);
    assert!(other.try_acquire("r10/scope", S).unwrap().is_some(), "free when drop returned");
    drop(l);
    c.close();
}

/// detach keeps the lock past the guard; expiring fires before the deadline
/// and is disconnected when the lease is released first.
#[test]
fn lease_detach_and_expiring() {
    let _w = watchdog("lease_detach_and_expiring", BOUND);
    let (_rt, s) = server();
    let c = connect(&s);
    let l = c.acquire("blk/detach", Duration::from_secs(30), S).unwrap();
    let t = l.detach();
    assert!(c.try_acquire("blk/detach", S).unwrap().is_none(), "detached: still held");
    c.release("blk/detach", t).unwrap();

    let l = c.acquire("blk/expiring", Duration::from_millis(600), S).unwrap();
    let ending = l.expiring(Duration::from_millis(200));
    ending.recv_timeout(Duration::from_secs(10)).expect("fires at deadline - margin");
    assert!(l.remaining() <= Duration::from_millis(400) + Duration::from_millis(5));
    let _ = l.release();

    let l = c.acquire("blk/expiring2", Duration::from_secs(30), S).unwrap();
    let ending = l.expiring(Duration::from_secs(1));
    l.release().unwrap();
    assert_eq!(
        ending.recv_timeout(Duration::from_secs(10)),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected)
    );
    c.close();
}

/// R11 for the blocking API: a cancelled token ends the call with Cancelled
/// and leaves the key free (the testkit's rust-blocking cancel_queued cell
/// checks the withdrawal of a queued acquire on the server's queue).
#[test]
fn acquire_cancellable_withdraws() {
    let _w = watchdog("acquire_cancellable_withdraws", BOUND);
    let (_rt, s) = server();
    let c = connect(&s);
    let holder = c.acquire("blk/cancel", Duration::from_secs(30), S).unwrap();
    let cancel = ticketing::blocking::CancelToken::new();
    let waiter = {
        let (c, cancel) = (c.clone(), cancel.clone());
        std::thread::spawn(move || c.acquire_cancellable("blk/cancel", Duration::from_secs(30), Duration::from_secs(30), &cancel))
    };
    cancel.cancel();
    assert_eq!(waiter.join().unwrap().unwrap_err(), ErrorKind::Cancelled);
    assert!(cancel.is_cancelled());
    // Started with a cancelled token: fails at once.
    assert_eq!(
        c.acquire_cancellable("blk/cancel2", Duration::from_secs(30), S, &cancel)
            .unwrap_err(),
        ErrorKind::Cancelled
    );
    holder.release().unwrap();
    assert!(c.try_acquire("blk/cancel", S).unwrap().is_some(), "no grant left behind");
    c.close();
}

/// Issue 33 finding 4: blocking callers write their own frames, and those
/// handed answers in one burst write the next frames together (a write
/// token per answer, settled when its caller runs). An answer for a future
/// that is not polled again (the async API of the same client, `as_async`)
/// carries no token: it must not hold back the blocking callers' frames,
/// and dropping that future later still releases its grant.
#[test]
fn an_unpolled_async_call_never_stalls_blocking_callers() {
    use std::future::Future;
    let _w = watchdog("an_unpolled_async_call_never_stalls_blocking_callers", BOUND);
    let (rt, s) = server();
    let c = connect(&s);
    let mut parked = Box::pin(c.as_async().acquire("blk/parked", Duration::from_secs(30), Duration::from_secs(5)));
    {
        let _rt = rt.enter(); // the async call's timers
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(parked.as_mut().poll(&mut cx).is_pending(), "sent, not answered yet");
    }
    // The server granted it (the key is held); its answer then reaches the
    // client, which hands it to a future nobody polls.
    let end = Instant::now() + Duration::from_secs(20);
    while c.try_acquire("blk/parked", Duration::from_secs(30)).unwrap().is_some() {
        assert!(Instant::now() < end, "the parked acquire was never granted");
    }
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let c = c.clone();
            std::thread::spawn(move || {
                for _ in 0..200 {
                    c.acquire(format!("blk/burst/{i}"), Duration::from_secs(10), S)
                        .unwrap()
                        .release()
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    drop(parked); // answered, never seen: the client releases the grant
    let end = Instant::now() + Duration::from_secs(20);
    while c.try_acquire("blk/parked", Duration::from_secs(30)).unwrap().is_none() {
        assert!(Instant::now() < end, "the parked acquire's grant was never released");
    }
    c.close();
}

/// Issue 33 finding 4: 64 threads on one blocking client share its
/// connection's writes and reads (a waiting caller reads and dispatches the
/// answers that came, its own and the others'). Every answer must reach its
/// own caller: 64 threads × 25 increments of a plain counter under one key
/// come out exact, and as many pairs on 64 distinct keys all succeed.
#[test]
fn sixty_four_threads_share_the_connection_and_count_exactly() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let _w = watchdog("sixty_four_threads_share_the_connection_and_count_exactly", BOUND);
    let (_rt, s) = server();
    let c = connect(&s);
    let counter = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..64)
        .map(|i| {
            let (c, counter) = (c.clone(), counter.clone());
            std::thread::spawn(move || {
                for _ in 0..25 {
                    let l = c.acquire("blk/count", Duration::from_secs(10), Duration::from_secs(30)).unwrap();
                    // Not atomic as a whole: only the lock makes it exact.
                    let v = counter.load(Ordering::Relaxed);
                    std::thread::yield_now();
                    counter.store(v + 1, Ordering::Relaxed);
                    l.release().unwrap();
                    let own = c.acquire(format!("blk/own/{i}"), Duration::from_secs(10), S).unwrap();
                    own.release().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(counter.load(Ordering::Relaxed), 64 * 25);
    c.close();
}
