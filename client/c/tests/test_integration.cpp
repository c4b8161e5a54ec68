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
