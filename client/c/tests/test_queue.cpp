// The completion queue (tk_queue_*): many ops driven from one event-loop
// thread. Failure paths against the scripted fake, the happy path and FIFO
// against the real server.
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fake.hpp"
#include "server.hpp"
#include "ticketing.h"

namespace {

// Polls q until `want` events arrived or `limit` passed, as an event loop would
// (poll on the fd with the queue's timeout).
std::vector<tk_event> collect(tk_queue *q, size_t want, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    std::vector<tk_event> out;
    auto end = std::chrono::steady_clock::now() + limit;
    while (out.size() < want && std::chrono::steady_clock::now() < end) {
        struct pollfd p = {tk_queue_fd(q), POLLIN, 0};
        int t = tk_queue_timeout_ms(q);
        poll(&p, 1, t < 0 || t > 100 ? 100 : t);
        tk_event ev[8];
        size_t n = tk_queue_poll(q, ev, 8);
        out.insert(out.end(), ev, ev + n);
    }
    return out;
}

bool readable(int fd) {
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, 0) == 1;
}

struct Queue {
    tk_queue *q;
    explicit Queue(tk_client *c) : q(tk_queue_new(c)) {}
    ~Queue() { tk_queue_free(q); }
};

void *tag(int i) { return (void *)(intptr_t)i; }

} // namespace

TEST(Queue, GrantsAndReleasesComeBackWithTheirUserPointer) {
    Fake f([](FakeConn &c) {
        loop(c, [](FakeConn &c, const Req &q) {
            if (q.op == 'A') c.send('G', q.req_id, 100 + (uint64_t)(q.key[1] - '0'), 0, 625);
            if (q.op == 'R') c.send(q.arg == 100 + (uint64_t)(q.key[1] - '0') ? 'O' : 'N', q.req_id);
        });
    });
    Client cl({f.addr()});
    ASSERT_EQ(tk_client_wait_connected(cl.c, 0), TK_OK);
    Queue q(cl.c);
    ASSERT_NE(q.q, nullptr);
    uint64_t t0 = tk_now_ns();
    for (int i = 0; i < 3; i++) {
        std::string k = "k" + std::to_string(i);
        ASSERT_EQ(tk_queue_acquire(q.q, k.data(), k.size(), 1000, 5000, tag(i), nullptr), TK_OK);
    }
    EXPECT_EQ(tk_queue_pending(q.q), 3u);
    auto evs = collect(q.q, 3);
    ASSERT_EQ(evs.size(), 3u);
    std::map<intptr_t, tk_event> by;
    for (auto &e : evs) by[(intptr_t)e.user] = e;
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(by.count(i), 1u);
        const tk_event &e = by[i];
        EXPECT_EQ(e.kind, TK_EV_ACQUIRE);
        EXPECT_EQ(e.status, TK_OK);
        EXPECT_EQ(e.lease.token, 100u + i);
        EXPECT_EQ(std::string((const char *)e.lease.key, e.lease.key_len), "k" + std::to_string(i));
        // conservative deadline: send time + queued 625 x 16 ms + lease 1000 ms
        EXPECT_GE(e.lease.deadline_ns, t0 + (625ull * 16 + 1000) * 1000000ull);
        EXPECT_LE(e.lease.deadline_ns, tk_now_ns() + (625ull * 16 + 1000) * 1000000ull);
        ASSERT_EQ(tk_queue_release(q.q, &e.lease, tag(10 + i)), TK_OK);
    }
    // a release under a token the key does not hold is N
    ASSERT_EQ(tk_queue_release_token(q.q, "k0", 2, 7, tag(99)), TK_OK);
    evs = collect(q.q, 4);
    ASSERT_EQ(evs.size(), 4u);
    for (auto &e : evs) {
        EXPECT_EQ(e.kind, TK_EV_RELEASE);
        intptr_t u = (intptr_t)e.user;
        if (u == 99) {
            EXPECT_EQ(e.status, TK_NOT_HOLDER);
            EXPECT_EQ(e.lease.token, 7u);
        } else {
            EXPECT_EQ(e.status, TK_OK) << u;
            EXPECT_EQ(e.lease.token, 100u + (u - 10));
        }
    }
    EXPECT_EQ(tk_queue_pending(q.q), 0u);
    EXPECT_EQ(tk_queue_timeout_ms(q.q), -1);
}

TEST(Queue, PollReturnsAtMostNAndTheFdStaysReadable) {
    Fake f([](FakeConn &c) { loop(c, [](FakeConn &c, const Req &q) { c.send('G', q.req_id, 1); }); });
    Client cl({f.addr()});
    ASSERT_EQ(tk_client_wait_connected(cl.c, 0), TK_OK);
    Queue q(cl.c);
    for (int i = 0; i < 5; i++) ASSERT_EQ(tk_queue_acquire(q.q, "k", 1, 1000, 0, tag(i), nullptr), TK_OK);
    // wait until all five are answered before taking any
    eventually([&] { return readable(tk_queue_fd(q.q)); }, std::chrono::seconds(2));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    tk_event ev[2];
    size_t got = tk_queue_poll(q.q, ev, 2);
    EXPECT_EQ(got, 2u);
    EXPECT_TRUE(readable(tk_queue_fd(q.q))) << "three more are waiting";
    EXPECT_EQ(tk_queue_timeout_ms(q.q), 0);
    got += tk_queue_poll(q.q, ev, 2);
    got += tk_queue_poll(q.q, ev, 2);
    EXPECT_EQ(got, 5u);
    EXPECT_FALSE(readable(tk_queue_fd(q.q)));
}

TEST(Queue, LostConnectionAfterSendIsIndeterminate) {
    Fake f([](FakeConn &c) {
        Req q;
        if (c.read(q)) shutdown(c.fd, SHUT_RDWR); // the acquire was written, no answer comes
    });
    Client cl({f.addr()});
    ASSERT_EQ(tk_client_wait_connected(cl.c, 0), TK_OK);
    Queue q(cl.c);
    ASSERT_EQ(tk_queue_acquire(q.q, "k", 1, 1000, 5000, tag(1), nullptr), TK_OK);
    auto evs = collect(q.q, 1);
    ASSERT_EQ(evs.size(), 1u);
    EXPECT_EQ(evs[0].status, TK_INDETERMINATE);
    EXPECT_EQ(evs[0].lease.token, 0u);
}

TEST(Queue, NoConnectionEndsByTheTimerWithConnectError) {
    Client cl({"127.0.0.1:1"}, nullptr, 300);
    Queue q(cl.c);
    ASSERT_EQ(tk_queue_acquire(q.q, "k", 1, 1000, 200, tag(1), nullptr), TK_OK);
    int t = tk_queue_timeout_ms(q.q);
    EXPECT_GE(t, 0) << "an unsent acquire needs a timer";
    EXPECT_LE(t, 300);
    auto evs = collect(q.q, 1);
    ASSERT_EQ(evs.size(), 1u);
    EXPECT_EQ(evs[0].status, TK_E_CONNECT);
    EXPECT_EQ(tk_queue_pending(q.q), 0u);
}

TEST(Queue, BadArgumentsFailAtOnceWithoutAnEvent) {
    Client cl({"127.0.0.1:1"}, nullptr, 300);
    Queue q(cl.c);
    tk_op *op = reinterpret_cast<tk_op *>(1);
    EXPECT_EQ(tk_queue_acquire(q.q, "", 0, 1000, 0, nullptr, &op), TK_E_INVALID);
    EXPECT_EQ(op, nullptr);
    EXPECT_EQ(tk_queue_acquire(q.q, "a\x01", 2, 1000, 0, nullptr, nullptr), TK_E_INVALID);
    EXPECT_EQ(tk_queue_acquire(q.q, "k", 1, 0, 0, nullptr, nullptr), TK_E_INVALID);
    std::string big(251, 'k');
    EXPECT_EQ(tk_queue_acquire(q.q, big.data(), big.size(), 1000, 0, nullptr, nullptr), TK_E_INVALID);
    EXPECT_EQ(tk_queue_release(q.q, nullptr, nullptr), TK_E_INVALID);
    EXPECT_EQ(tk_queue_release_token(q.q, "", 0, 1, nullptr), TK_E_INVALID);
    EXPECT_EQ(tk_queue_pending(q.q), 0u);
    EXPECT_EQ(tk_queue_new(nullptr), nullptr);
}

TEST(Queue, FreeWithdrawsQueuedAcquiresAndHandsReleasesToTheReleaser) {
    std::atomic<int> cancels{0}, releases{0};
    std::atomic<bool> answer_releases{false};
    Fake f([&](FakeConn &c) {
        loop(c, [&](FakeConn &c, const Req &q) {
            if (q.op == 'C') {
                cancels++;
                c.send('T', (uint32_t)(q.arg >> 32));
                c.send('O', q.req_id);
            }
            if (q.op == 'R') {
                releases++;
                if (answer_releases) c.send('O', q.req_id);
                else c.send('U', q.req_id); // unconfirmed: the queue would retry
            }
        });
    });
    Client cl({f.addr()});
    ASSERT_EQ(tk_client_wait_connected(cl.c, 0), TK_OK);
    tk_queue *q = tk_queue_new(cl.c);
    ASSERT_EQ(tk_queue_acquire(q, "a", 1, 1000, 10000, tag(1), nullptr), TK_OK);
    ASSERT_EQ(tk_queue_release_token(q, "r", 1, 5, tag(2)), TK_OK);
    eventually([&] { return releases > 0; });
    collect(q, 1, std::chrono::milliseconds(100)); // takes the U: the release now waits to retry
    answer_releases = true;
    tk_queue_free(q); // the queued acquire gets C; the release goes to the background releaser
    eventually([&] { return cancels > 0 && releases >= 2; }, std::chrono::seconds(3));
    EXPECT_EQ(cancels.load(), 1);
    EXPECT_GE(releases.load(), 2);
}

TEST(Queue, FreeReleasesGrantsWhoseEventsWereNotReturned) {
    std::mutex mu;
    std::vector<uint64_t> released;
    std::atomic<uint64_t> next{1};
    Fake f([&](FakeConn &c) {
        loop(c, [&](FakeConn &c, const Req &q) {
            if (q.op == 'A') c.send('G', q.req_id, next++);
            if (q.op == 'R') {
                std::lock_guard<std::mutex> g(mu);
                released.push_back(q.arg);
                c.send('O', q.req_id);
            }
        });
    });
    Client cl({f.addr()});
    ASSERT_EQ(tk_client_wait_connected(cl.c, 0), TK_OK);
    tk_queue *q = tk_queue_new(cl.c);
    for (int i = 0; i < 5; i++) {
        std::string k = "k" + std::to_string(i);
        ASSERT_EQ(tk_queue_acquire(q, k.data(), k.size(), 1000, 0, tag(i), nullptr), TK_OK);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200)); // all five granted
    tk_event ev[1];
    ASSERT_EQ(tk_queue_poll(q, ev, 1), 1u);
    ASSERT_EQ(ev[0].status, TK_OK);
    uint64_t kept = ev[0].lease.token; // this one the caller holds: not released by free
    tk_queue_free(q);
    eventually(
        [&] {
            std::lock_guard<std::mutex> g(mu);
            return released.size() >= 4;
        },
        std::chrono::seconds(3));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::lock_guard<std::mutex> g(mu);
    EXPECT_EQ(released.size(), 4u) << "the four grants nobody received are released, the received one is not";
    for (uint64_t t : released) EXPECT_NE(t, kept);
}

TEST(Queue, WaitingForAConnectionDoesNotSpin) {
    Client cl({"127.0.0.1:1"}, nullptr, 1000);
    Queue q(cl.c);
    ASSERT_EQ(tk_queue_acquire(q.q, "k", 1, 1000, 1000, tag(1), nullptr), TK_OK);
    int wakeups = 0;
    std::vector<tk_event> evs;
    while (evs.empty() && wakeups < 1000) {
        struct pollfd p = {tk_queue_fd(q.q), POLLIN, 0};
        poll(&p, 1, tk_queue_timeout_ms(q.q));
        wakeups++;
        tk_event ev[1];
        if (tk_queue_poll(q.q, ev, 1) == 1) evs.push_back(ev[0]);
    }
    ASSERT_EQ(evs.size(), 1u);
    EXPECT_EQ(evs[0].status, TK_E_CONNECT);
    EXPECT_LT(wakeups, 30) << "the loop was woken every few ms while no connection was up";
}

TEST(Queue, NullArgumentsAreHarmless) {
    EXPECT_EQ(tk_queue_fd(nullptr), -1);
    EXPECT_EQ(tk_queue_timeout_ms(nullptr), -1);
    EXPECT_EQ(tk_queue_pending(nullptr), 0u);
    tk_event ev[1];
    EXPECT_EQ(tk_queue_poll(nullptr, ev, 1), 0u);
    tk_queue_cancel(nullptr, nullptr);
    tk_queue_free(nullptr);
    Client cl({"127.0.0.1:1"}, nullptr, 300);
    Queue q(cl.c);
    EXPECT_EQ(tk_queue_poll(q.q, nullptr, 4), 0u);
}

TEST(QueueIntegration, SixtyFourChainsOnEightKeysQueueFairlyWithABlockingCaller) {
    Server s;
    NEED_SERVER(s);
    Client cl({s.addr});
    tk_client *c = cl.c;
    ASSERT_EQ(tk_client_wait_connected(c, 0), TK_OK);
    std::atomic<bool> stop{false};
    std::atomic<int> blocking_pairs{0};
    // a blocking caller on the same keys and client, concurrently
    std::thread t([&] {
        while (!stop) {
            tk_lease l;
            if (tk_acquire(c, "it/q/0", 6, 5000, 20000, &l) == TK_OK && tk_release(c, &l) == TK_OK) blocking_pairs++;
        }
    });
    tk_queue *q = tk_queue_new(c);
    const int chains = 64, rounds = 20;
    std::vector<int> left(chains, rounds);
    std::map<std::string, uint64_t> last; // per key: the last token granted to a chain
    auto key = [](int i) { return "it/q/" + std::to_string(i % 8); };
    for (int i = 0; i < chains; i++) {
        std::string k = key(i);
        ASSERT_EQ(tk_queue_acquire(q, k.data(), k.size(), 5000, 20000, tag(i), nullptr), TK_OK);
    }
    int pairs = 0, failures = 0;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (tk_queue_pending(q) > 0 && std::chrono::steady_clock::now() < end) {
        struct pollfd p = {tk_queue_fd(q), POLLIN, 0};
        poll(&p, 1, tk_queue_timeout_ms(q));
        tk_event ev[64];
        size_t n = tk_queue_poll(q, ev, 64);
        for (size_t j = 0; j < n; j++) {
            int i = (int)(intptr_t)ev[j].user;
            std::string k = key(i);
            if (ev[j].status != TK_OK) {
                failures++;
                continue;
            }
            if (ev[j].kind == TK_EV_ACQUIRE) {
                // a chain releases only after its grant came, so the next grant of
                // the key is seen after this one: tokens seen per key increase
                EXPECT_GT(ev[j].lease.token, last[k]) << "fencing tokens increase per key";
                last[k] = ev[j].lease.token;
                ASSERT_EQ(tk_queue_release(q, &ev[j].lease, tag(i)), TK_OK);
            } else {
                pairs++;
                if (--left[i] > 0) {
                    ASSERT_EQ(tk_queue_acquire(q, k.data(), k.size(), 5000, 20000, tag(i), nullptr), TK_OK);
                }
            }
        }
    }
    stop = true;
    t.join();
    tk_queue_free(q);
    EXPECT_EQ(failures, 0);
    EXPECT_EQ(pairs, chains * rounds);
    EXPECT_GT(blocking_pairs.load(), 0) << "the blocking caller was served in the same FIFO";
}

TEST(QueueIntegration, ForkedChildNeitherDrivesNorWaits) {
    Server s;
    NEED_SERVER(s);
    Client cl({s.addr});
    tk_client *c = cl.c;
    ASSERT_EQ(tk_client_wait_connected(c, 0), TK_OK);
    tk_lease held;
    ASSERT_EQ(tk_acquire(c, "it/qfork", 8, 5000, 0, &held), TK_OK);
    tk_queue *q = tk_queue_new(c);
    ASSERT_EQ(tk_queue_acquire(q, "it/qfork", 8, 5000, 10000, tag(1), nullptr), TK_OK); // queued behind held
    pid_t p = fork();
    if (p == 0) {
        tk_event ev[4];
        int bad = 0;
        if (tk_queue_acquire(q, "it/other", 8, 5000, 0, nullptr, nullptr) != TK_E_FORKED) bad |= 1;
        if (tk_queue_poll(q, ev, 4) != 0) bad |= 2;
        tk_queue_free(q); // must not wait for the parent's in-flight acquire
        _exit(bad);
    }
    int st = 0;
    waitpid(p, &st, 0);
    EXPECT_TRUE(WIFEXITED(st)) << "the child hung or crashed";
    EXPECT_EQ(WEXITSTATUS(st), 0);
    // the parent's queue is untouched: its waiter is granted on release
    ASSERT_EQ(tk_release(c, &held), TK_OK);
    auto evs = collect(q, 1);
    ASSERT_EQ(evs.size(), 1u);
    EXPECT_EQ(evs[0].status, TK_OK);
    EXPECT_GT(evs[0].lease.token, held.token);
    ASSERT_EQ(tk_queue_release(q, &evs[0].lease, nullptr), TK_OK);
    evs = collect(q, 1);
    ASSERT_EQ(evs.size(), 1u);
    EXPECT_EQ(evs[0].status, TK_OK);
    tk_queue_free(q);
}
