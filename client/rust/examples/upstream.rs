//! The upstream Ticketing project's published workload (issue 35), run with
//! this client against $TICKETING_ADDR (comma-separated: a cluster's nodes):
//! 32 contended keys × 1,250 lock cycles = 40,000 cycles by 64 fixed tasks
//! (two per key), each cycle acquire (30 s wait, 30 s lease) → a counter
//! read-modify-write held under the lock → acknowledged release. At the end
//! every key's counter must be exactly 1,250 (a lost update means two holders
//! at once). Prints one line `UPSTREAM {...}` with cycles/s; run it three
//! times and take the median (scripts/bench-report.sh does, rows upstream
//! and upstream3).
//!
//!   TICKETING_ADDR=127.0.0.1:7470 cargo run --release --example upstream

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ticketing::{Client, Config};

const KEYS: usize = 32;
const CYCLES_PER_KEY: u64 = 1_250;
const TASKS: usize = 64;

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

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let c = Client::connect(cfg()).await.expect("connect");
        let counters: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
        let per_task = CYCLES_PER_KEY * KEYS as u64 / TASKS as u64;
        let wait = Duration::from_secs(30);
        let lease = Duration::from_secs(30);
        let run = format!("{:x}", std::process::id());
        let t = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..TASKS {
            let (c, counters, run) = (c.clone(), counters.clone(), run.clone());
            tasks.push(tokio::spawn(async move {
                let k = i % KEYS;
                let key = format!("upstream/{run}/{k}");
                for _ in 0..per_task {
                    let l = c.acquire(&key, lease, wait).await.expect("acquire");
                    // a non-atomic read-modify-write: only mutual exclusion keeps it exact
                    let v = counters[k].load(Ordering::Relaxed);
                    tokio::task::yield_now().await;
                    counters[k].store(v + 1, Ordering::Relaxed);
                    l.release().await.expect("release");
                }
            }));
        }
        for h in tasks {
            h.await.expect("task");
        }
        let secs = t.elapsed().as_secs_f64();
        c.close().await;
        let bad = counters.iter().filter(|n| n.load(Ordering::Relaxed) != CYCLES_PER_KEY).count();
        let cycles = CYCLES_PER_KEY * KEYS as u64;
        println!(
            "UPSTREAM {{\"keys\":{KEYS},\"tasks\":{TASKS},\"cycles\":{cycles},\"seconds\":{secs:.3},\"cycles_per_sec\":{:.0},\"bad_counters\":{bad}}}",
            cycles as f64 / secs
        );
        assert_eq!(bad, 0, "{bad} keys' counters are not {CYCLES_PER_KEY}: two holders at once");
    });
}
