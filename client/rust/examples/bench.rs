//! `ci.sh bench`: acquire+release pairs through ONE client against
//! $TICKETING_ADDR for $BENCH_SECONDS each, with 64 concurrent tasks and with
//! 1 task, for the async API and the blocking API.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ticketing::{Client, Config};

fn cfg() -> Config {
    let addr = std::env::var("TICKETING_ADDR").unwrap_or_else(|_| "127.0.0.1:7470".into());
    let mut b = Config::builder().addrs(addr.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from));
    if let Ok(t) = std::env::var("TICKETING_TOKEN") {
        if !t.is_empty() {
            b = b.token(t);
        }
    }
    b.build().expect("config")
}

fn seconds() -> f64 {
    std::env::var("BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(5.0)
}

fn line(api: &str, callers: usize, pairs: u64, secs: f64) {
    println!(
        "BENCH {{\"lang\":\"rust\",\"api\":\"{api}\",\"callers\":{callers},\"pairs\":{pairs},\"seconds\":{secs:.1},\"pairs_per_sec\":{:.1}}}",
        pairs as f64 / secs
    );
}

async fn run_async(c: &Client, callers: usize, secs: f64) -> u64 {
    let stop = Arc::new(AtomicBool::new(false));
    let pairs = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..callers {
        let (c, stop, pairs) = (c.clone(), stop.clone(), pairs.clone());
        tasks.push(tokio::spawn(async move {
            let key = format!("bench/rust/{i}");
            while !stop.load(Ordering::Relaxed) {
                let l = c
                    .acquire(&key, Duration::from_secs(10), Duration::from_secs(5))
                    .await
                    .expect("acquire");
                l.release().await.expect("release");
                pairs.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("task");
    }
    pairs.load(Ordering::Relaxed)
}

fn run_blocking(c: &ticketing::blocking::Client, callers: usize, secs: f64) -> u64 {
    let stop = Arc::new(AtomicBool::new(false));
    let pairs = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..callers)
        .map(|i| {
            let (c, stop, pairs) = (c.clone(), stop.clone(), pairs.clone());
            std::thread::spawn(move || {
                let key = format!("bench/rust/{i}");
                while !stop.load(Ordering::Relaxed) {
                    let l = c.acquire(&key, Duration::from_secs(10), Duration::from_secs(5)).expect("acquire");
                    l.release().expect("release");
                    pairs.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("thread");
    }
    pairs.load(Ordering::Relaxed)
}

/// `BENCH_CALLERS=64` (a comma list) runs only those caller counts (default 64,1).
fn callers() -> Vec<usize> {
    std::env::var("BENCH_CALLERS")
        .ok()
        .map(|s| s.split(',').filter_map(|c| c.trim().parse().ok()).collect::<Vec<usize>>())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| vec![64, 1])
}

/// `BENCH_API=tokio` or `blocking` runs only that API (default both).
fn wants(api: &str) -> bool {
    std::env::var("BENCH_API").map_or(true, |a| a.is_empty() || a == api)
}

fn main() {
    let secs = seconds();
    if wants("tokio") {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let c = Client::connect(cfg()).await.expect("connect");
            for callers in callers() {
                let t = Instant::now();
                let n = run_async(&c, callers, secs).await;
                line("tokio", callers, n, t.elapsed().as_secs_f64());
            }
            c.close().await;
        });
        drop(rt);
    }
    if wants("blocking") {
        let c = ticketing::blocking::Client::connect(cfg()).expect("connect");
        for callers in callers() {
            let t = Instant::now();
            let n = run_blocking(&c, callers, secs);
            line("blocking", callers, n, t.elapsed().as_secs_f64());
        }
        c.close();
    }
}
