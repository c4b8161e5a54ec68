// Integration tests against the real server ($TICKETING_BIN serve).
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ticketing.hpp"
#include "server.hpp"

TEST(Integration, AcquireReleaseFifoAndTokens) {
    Server s;
    NEED_SERVER(s);
    ticketing::Options o;
    o.addrs = {s.addr};
    ticketing::Client cl(o);
    auto a = cl.acquire("it/fifo", ms(5000), ms(0));
    EXPECT_FALSE(cl.try_acquire("it/fifo", ms(1000)).has_value());
    // Started from this thread: on plain TCP the frame is written before
    // start_acquire returns, so the arrival order does not depend on how soon
    // a new thread gets a CPU on a loaded machine.
    std::vector<ticketing::PendingAcquire> ps;
    for (int i = 0; i < 3; i++) {
        ps.push_back(cl.start_acquire("it/fifo", ms(5000), ms(10000)));
        std::this_thread::sleep_for(ms(100)); // arrival order
    }
    uint64_t first = a.token();
    a.release();
    std::vector<uint64_t> got(3);
    for (int i = 0; i < 3; i++) {
        auto l = ps[i].wait();
        got[i] = l.token();
        l.release(); // FIFO hand-off to the next
    }
    EXPECT_GT(got[0], first);
    EXPECT_GT(got[1], got[0]);
    EXPECT_GT(got[2], got[1]);
}

TEST(Integration, LeaseExpiryHandsOff) {
    Server s;
    NEED_SERVER(s);
    ticketing::Options o;
    o.addrs = {s.addr};
    ticketing::Client cl(o);
    auto a = cl.acquire("it/exp", ms(300), ms(0));
    a.detach();
    auto b = cl.acquire("it/exp", ms(1000), ms(5000));
    EXPECT_GT(b.token(), a.token());
    EXPECT_GT(b.remaining().count(), 500);
}

TEST(Integration, CancelQueuedAcquireC) {
    Server s;
    NEED_SERVER(s);
    std::vector<const char *> a = {s.addr.c_str()};
    tk_config cfg{};
    cfg.addrs = a.data();
    cfg.n_addrs = 1;
    tk_client *c = tk_client_new(&cfg);
    ASSERT_EQ(tk_client_wait_connected(c, 0), TK_OK);
    tk_lease l1, l2;
    ASSERT_EQ(tk_acquire(c, "it/cancel", 9, 5000, 0, &l1), TK_OK);
    tk_op *op;
    ASSERT_EQ(tk_acquire_start(c, "it/cancel", 9, 5000, 10000, &op), TK_OK);
    std::this_thread::sleep_for(ms(100));
    tk_op_cancel(op);
    EXPECT_EQ(tk_op_wait(op, nullptr), TK_E_CANCELLED);
    tk_op_free(op);
    ASSERT_EQ(tk_release(c, &l1), TK_OK);
    // the withdrawn waiter was not granted: the key is free
    ASSERT_EQ(tk_acquire(c, "it/cancel", 9, 5000, 3000, &l2), TK_OK);
    EXPECT_EQ(tk_release(c, &l2), TK_OK);
    EXPECT_EQ(tk_release(c, &l2), TK_NOT_HOLDER);
    tk_client_free(c);
}

TEST(Integration, TokenAuthAndWrongToken) {
    Server s("s3cret-token");
    NEED_SERVER(s);
    ticketing::Options o;
    o.addrs = {s.addr};
    o.token = "s3cret-token";
    ticketing::Client cl(o);
    auto l = cl.acquire("it/auth", ms(1000), ms(0));
    l.release();
    o.token = "wrong";
    o.connect_timeout = ms(1000);
    EXPECT_THROW(ticketing::Client bad(o), ticketing::AuthError);
}

TEST(Integration, HundredInFlightOneClient) {
    Server s;
    NEED_SERVER(s);
    ticketing::Options o;
    o.addrs = {s.addr};
    ticketing::Client cl(o);
    std::atomic<int> okc{0};
    std::vector<std::thread> ts;
    for (int i = 0; i < 100; i++)
        ts.emplace_back([&, i] {
            for (int j = 0; j < 20; j++) {
                auto l = cl.acquire("it/many/" + std::to_string(i % 10), ms(5000), ms(20000));
                l.release();
                okc++;
            }
        });
    for (auto &t : ts) t.join();
    EXPECT_EQ(okc.load(), 2000);
}

TEST(Integration, EventLoopForm) {
    Server s;
    NEED_SERVER(s);
    ticketing::Options o;
    o.addrs = {s.addr};
    ticketing::Client cl(o);
    auto pa = cl.start_acquire("it/poll", ms(1000), ms(1000));
    std::optional<ticketing::Lease> l;
    for (int i = 0; i < 1000 && !l; i++) {
        struct pollfd_ {
            int fd;
            short events, revents;
        };
        l = pa.drive();
        if (!l) {
            auto t = pa.timeout();
            fd_set rs;
            FD_ZERO(&rs);
            FD_SET(pa.fd(), &rs);
            timeval tv{0, (t ? (long)t->count() : 100) * 1000};
            select(pa.fd() + 1, &rs, nullptr, nullptr, &tv);
        }
    }
    ASSERT_TRUE(l.has_value());
    EXPECT_GT(l->token(), 0u);
}

TEST(Integration, ForkedChildRefusesInheritedClient) {
    Server s;
    NEED_SERVER(s);
    ticketing::Options o;
    o.addrs = {s.addr};
    ticketing::Client cl(o);
    pid_t p = fork();
    if (p == 0) {
        tk_lease l;
        _exit(tk_acquire(cl.native(), "it/fork", 7, 1000, 0, &l) == TK_E_FORKED ? 0 : 1);
    }
    int st = 0;
    waitpid(p, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

// Finding 9: ticketing::Mutex is Lockable (std::lock_guard, std::unique_lock);
// a moved-from Client throws ClosedError instead of crashing.
TEST(IntegrationCpp, MutexWithStdLocksAndMovedFromClientThrows) {
    Server s;
    NEED_SERVER(s);
    ticketing::Options o;
    o.addrs = {s.addr};
    ticketing::Client cl(o);
    ticketing::Mutex m(cl, "it/mutex", ms(10000), ms(1000));
    {
        std::lock_guard<ticketing::Mutex> g(m);
        EXPECT_TRUE(m.lease().held());
        EXPECT_FALSE(cl.try_acquire("it/mutex", ms(1000)).has_value()) << "held through the guard";
    }
    EXPECT_FALSE(m.lease().held());
    {
        std::unique_lock<ticketing::Mutex> u(m, std::try_to_lock);
        EXPECT_TRUE(u.owns_lock());
    }
    auto l = cl.try_acquire("it/mutex", ms(1000));
    EXPECT_TRUE(l.has_value()) << "released when the unique_lock ended";
    l.reset();
    ticketing::Client moved(std::move(cl));
    EXPECT_THROW(cl.acquire("it/x", ms(1000), ms(0)), ticketing::ClosedError);
    EXPECT_THROW(cl.release("it/x", 1), ticketing::ClosedError);
    EXPECT_NO_THROW(moved.acquire("it/x", ms(1000), ms(0)));
}

// Finding 9: the C++ wrapper of the completion queue.
TEST(IntegrationCpp, QueueWrapperAcquiresAndReleases) {
    Server s;
    NEED_SERVER(s);
    ticketing::Options o;
    o.addrs = {s.addr};
    ticketing::Client cl(o);
    ticketing::Queue q(cl);
    int tag = 0;
    std::vector<tk_event> evs;
    auto next = [&](size_t want) {
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (evs.size() < want && std::chrono::steady_clock::now() < end) {
            struct pollfd p{q.fd(), POLLIN, 0};
            int t = q.timeout_ms();
            ::poll(&p, 1, t < 0 || t > 100 ? 100 : t);
            q.poll(evs);
        }
        return evs.size() >= want;
    };
    q.acquire("it/cppq", ms(10000), ms(1000), &tag);
    ASSERT_TRUE(next(1));
    ASSERT_EQ(evs[0].status, TK_OK) << evs[0].lease.message;
    EXPECT_EQ(evs[0].user, &tag);
    EXPECT_EQ(evs[0].kind, TK_EV_ACQUIRE);
    EXPECT_FALSE(cl.try_acquire("it/cppq", ms(1000)).has_value()) << "held through the queue";
    q.release(evs[0].lease, &tag);
    ASSERT_TRUE(next(2));
    EXPECT_EQ(evs[1].status, TK_OK);
    EXPECT_EQ(evs[1].kind, TK_EV_RELEASE);
    EXPECT_EQ(q.pending(), 0u);
    EXPECT_THROW(q.acquire("", ms(1000), ms(0)), ticketing::InvalidArgument);
    ticketing::Queue moved(std::move(q));
    EXPECT_THROW(q.acquire("it/x", ms(1000), ms(0)), ticketing::ClosedError);
}
