// Acquire+release pairs through ONE client: 64 threads and 1 thread, for the
// C API (blocking) and the C++ API. Env: TICKETING_ADDR, TICKETING_TOKEN, BENCH_SECONDS.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>

#include "ticketing.hpp"

static void run(const char *lang, const char *api, tk_client *c, ticketing::Client *cpp, int callers, double secs) {
    std::atomic<bool> stop{false};
    std::atomic<long long> pairs{0};
    std::vector<std::thread> ts;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < callers; i++) {
        ts.emplace_back([&, i] {
            std::string key = std::string("bench/") + lang + "/" + std::to_string(i);
            long long n = 0;
            while (!stop.load(std::memory_order_relaxed)) {
                if (cpp) {
                    try {
                        auto l = cpp->acquire(key, std::chrono::milliseconds(10000), std::chrono::milliseconds(5000));
                        l.release();
                        n++;
                    } catch (const ticketing::Error &e) {
                        fprintf(stderr, "bench: %s\n", e.what());
                    }
                } else {
                    tk_lease l;
                    tk_status s = tk_acquire(c, key.data(), key.size(), 10000, 5000, &l);
                    if (s == TK_OK) s = tk_release(c, &l);
                    if (s == TK_OK) n++;
                    else fprintf(stderr, "bench: %s\n", tk_strerror(s));
                }
            }
            pairs += n;
        });
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(secs));
    stop = true;
    for (auto &t : ts) t.join();
    double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("BENCH {\"lang\":\"%s\",\"api\":\"%s\",\"callers\":%d,\"pairs\":%lld,\"seconds\":%.1f,\"pairs_per_sec\":%.1f}\n",
           lang, api, callers, pairs.load(), el, pairs.load() / el);
    fflush(stdout);
}

// api "queue": 64 callers as concurrent acquire+release chains on ONE event-loop thread
// (tk_queue): each chain's release starts when its grant arrives and its next
// acquire when the release is confirmed.
static void run_queue(tk_client *c, int callers, double secs) {
    tk_queue *q = tk_queue_new(c);
    if (!q) {
        perror("tk_queue_new");
        exit(1);
    }
    std::vector<std::string> keys;
    for (int i = 0; i < callers; i++) keys.push_back("bench/c-queue/" + std::to_string(i));
    auto start = [&](int i) {
        tk_status s = tk_queue_acquire(q, keys[i].data(), keys[i].size(), 10000, 5000, (void *)(intptr_t)i, nullptr);
        if (s != TK_OK) fprintf(stderr, "bench: %s\n", tk_strerror(s));
    };
    auto t0 = std::chrono::steady_clock::now();
    auto end = t0 + std::chrono::duration<double>(secs);
    for (int i = 0; i < callers; i++) start(i);
    long long pairs = 0;
    bool stopping = false;
    std::vector<tk_event> ev(callers);
    while (tk_queue_pending(q) > 0) {
        struct pollfd p = {tk_queue_fd(q), POLLIN, 0};
        poll(&p, 1, tk_queue_timeout_ms(q));
        size_t n = tk_queue_poll(q, ev.data(), ev.size());
        if (!stopping && std::chrono::steady_clock::now() >= end) stopping = true;
        for (size_t k = 0; k < n; k++) {
            int i = (int)(intptr_t)ev[k].user;
            if (ev[k].status != TK_OK) {
                fprintf(stderr, "bench: %s: %s\n", tk_strerror(ev[k].status), ev[k].lease.message);
                if (!stopping) start(i);
            } else if (ev[k].kind == TK_EV_ACQUIRE) {
                tk_queue_release(q, &ev[k].lease, ev[k].user);
            } else {
                pairs++;
                if (!stopping) start(i);
            }
        }
    }
    double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    tk_queue_free(q);
    printf("BENCH {\"lang\":\"c\",\"api\":\"queue\",\"callers\":%d,\"pairs\":%lld,\"seconds\":%.1f,\"pairs_per_sec\":%.1f}\n",
           callers, pairs, el, pairs / el);
    fflush(stdout);
}

int main() {
    const char *addr = getenv("TICKETING_ADDR");
    if (!addr) {
        fprintf(stderr, "set TICKETING_ADDR\n");
        return 2;
    }
    const char *tok = getenv("TICKETING_TOKEN");
    double secs = getenv("BENCH_SECONDS") ? atof(getenv("BENCH_SECONDS")) : 5.0;
    ticketing::Options o;
    o.addrs = {addr};
    o.token = tok ? tok : "";
    ticketing::Client cl(o);
    // BENCH_ONLY (optional, for profiling): e.g. "c64" or "cpp1" runs that configuration only.
    std::string only = getenv("BENCH_ONLY") ? getenv("BENCH_ONLY") : "";
    for (int callers : {64, 1})
        if (only.empty() || only == "c" + std::to_string(callers)) run("c", "blocking", cl.native(), nullptr, callers, secs);
    for (int callers : {64, 1})
        if (only.empty() || only == "cpp" + std::to_string(callers)) run("cpp", "blocking", nullptr, &cl, callers, secs);
    for (int callers : {64, 1})
        if (only.empty() || only == "q" + std::to_string(callers)) run_queue(cl.native(), callers, secs);
    return 0;
}
