// The C library's own logic for protocol 1.1 and the edge rules' API (what the
// testkit cannot see: the handshake's feature ping and label frames, which
// frames a 1.0 server never gets, the lease object's state, the messages).
#include <gtest/gtest.h>

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ticketing.h"
#include "ticketing.hpp"
#include "tk_wire.h"
#include "fake.hpp"

namespace {
// Records every request (the feature ping and L are answered by FakeConn::read).
struct Recorder {
    std::mutex mu;
    std::vector<Req> reqs;
    std::vector<std::string> labels;
    size_t count(uint8_t op) {
        std::lock_guard<std::mutex> g(mu);
        size_t n = 0;
        for (auto &q : reqs) n += q.op == op;
        return n;
    }
};

std::function<void(FakeConn &)> granting(Recorder &r, uint64_t token = 500) {
    return [&r, token](FakeConn &c) {
        loop(c, [&r, token](FakeConn &c, const Req &q) {
            {
                std::lock_guard<std::mutex> g(r.mu);
                r.reqs.push_back(q);
                r.labels.push_back(c.label);
            }
            if (q.op == 'A' || q.op == 'S') c.send('G', q.req_id, token);
            if (q.op == 'R' || q.op == 'X') c.send('O', q.req_id);
        });
    };
}

// A 1.0 (features 0) or 1.1 fake that grants every acquire with token and
// answers every release O, and a client connected to it.
struct Granted {
    Recorder r;
    Fake f;
    Client cl;
    explicit Granted(uint16_t features = 0, uint64_t token = 500)
        : f(granting(r, token)), cl((f.features = features, std::vector<std::string>{f.addr()})) {
        connected = tk_client_wait_connected(cl.c, 0) == TK_OK;
    }
    bool connected = false;
};

std::string hostname() {
    char h[256] = {0};
    gethostname(h, sizeof h - 1);
    return h;
}
} // namespace

TEST(V11, SetsAreNeverSentToA10Server) {
    Granted fx; // features 0: a 1.0 server
    ASSERT_TRUE(fx.connected);
    auto &r = fx.r;
    auto &cl = fx.cl;
    tk_key k[] = {{"a", 1}, {"b", 1}};
    tk_lease l{};
    EXPECT_EQ(tk_acquire_set(cl.c, k, 2, 1000, 0, &l), TK_E_UNSUPPORTED);
    EXPECT_NE(std::string(tk_errmsg()).find("not supported"), std::string::npos) << tk_errmsg();
    EXPECT_EQ(tk_release_set(cl.c, k, 2, 7, nullptr), TK_E_UNSUPPORTED);
    tk_lease one{};
    ASSERT_EQ(tk_acquire(cl.c, "a", 1, 1000, 0, &one), TK_OK); // the connection still works
    EXPECT_EQ(r.count('S') + r.count('X') + r.count('L'), 0u);
    EXPECT_EQ(r.labels.back(), ""); // no L to a server that did not announce LABELS
}

TEST(V11, SetFramesAndDefaultLabelTo11Server) {
    Granted fx(TK_FEAT_KEY_SETS | TK_FEAT_LABELS, 900);
    ASSERT_TRUE(fx.connected);
    auto &r = fx.r;
    auto &cl = fx.cl;
    tk_key k[] = {{"acct/17", 7}, {"acct/42", 7}};
    tk_lease l{};
    ASSERT_EQ(tk_acquire_set(cl.c, k, 2, 30000, 5000, &l), TK_OK);
    EXPECT_EQ(l.token, 900u);
    EXPECT_EQ(std::string((const char *)l.key, l.key_len), "acct/17");
    ASSERT_EQ(tk_release_set(cl.c, k, 2, l.token, nullptr), TK_OK);
    std::lock_guard<std::mutex> g(r.mu);
    ASSERT_EQ(r.reqs.size(), 2u);
    EXPECT_EQ(r.reqs[0].op, 'S');
    EXPECT_EQ(r.reqs[0].arg, (30000ull << 32) | 5000);
    EXPECT_EQ(r.reqs[0].key, std::string("\x07" "acct/17" "\x07" "acct/42"));
    EXPECT_EQ(r.reqs[1].op, 'X');
    EXPECT_EQ(r.reqs[1].arg, 900u);
    // §12.3: "<host>/<pid> c/<version>", before the first lock request
    std::string want = hostname().substr(0, 200) + "/" + std::to_string(getpid()) + " c/" TK_VERSION;
    EXPECT_EQ(r.labels[0], want.substr(0, tk_label_cut((const uint8_t *)want.data(), want.size())));
}

TEST(V11, LabelAndAppNameOptions) {
    for (int app = 0; app < 3; app++) {
        Recorder r;
        Fake f(granting(r));
        f.features = TK_FEAT_LABELS;
        std::string a = f.addr();
        const char *addrs[] = {a.c_str()};
        tk_config cfg = TK_CONFIG_INIT;
        cfg.addrs = addrs;
        cfg.n_addrs = 1;
        std::string longl(80, 'x');
        if (app == 0) cfg.app_name = "billing";
        if (app == 1) cfg.label = longl.c_str();
        if (app == 2) cfg.label = "";
        tk_client *c = tk_client_new(&cfg);
        ASSERT_EQ(tk_client_wait_connected(c, 0), TK_OK);
        tk_lease l{};
        ASSERT_EQ(tk_acquire(c, "k", 1, 1000, 0, &l), TK_OK);
        std::string got = r.labels.back();
        const std::string want[] = {"billing " + hostname().substr(0, 20), std::string(64, 'x'), ""};
        // app name in front; a long label cut to 64 bytes; "" sends none
        EXPECT_EQ(app == 0 ? got.substr(0, want[0].size()) : got, want[app]);
        tk_client_free(c);
    }
}

TEST(V11, ReleaseLeaseTwiceIsANoOpThatSaysSo) {
    Granted fx;
    ASSERT_TRUE(fx.connected);
    auto &r = fx.r;
    auto &cl = fx.cl;
    tk_lease l{};
    ASSERT_EQ(tk_acquire(cl.c, "k", 1, 1000, 0, &l), TK_OK);
    int already = 7;
    EXPECT_EQ(tk_release_lease(cl.c, &l, &already), TK_OK);
    EXPECT_EQ(already, 0);
    EXPECT_EQ(l.released, 1);
    EXPECT_EQ(tk_release_lease(cl.c, &l, &already), TK_OK);
    EXPECT_EQ(already, 1);
    EXPECT_EQ(r.count('R'), 1u); // the second one sent nothing
}

TEST(V11, ClosedClientFailsAtOnceSendingNothing) {
    Granted fx;
    ASSERT_TRUE(fx.connected);
    auto &r = fx.r;
    auto &cl = fx.cl;
    tk_lease l{};
    ASSERT_EQ(tk_acquire(cl.c, "k", 1, 1000, 0, &l), TK_OK);
    tk_client_close(cl.c);
    EXPECT_EQ(tk_release_lease(cl.c, &l, nullptr), TK_E_CLOSED);
    EXPECT_EQ(l.released, 0); // nothing was sent: still held
    EXPECT_EQ(tk_release(cl.c, &l), TK_E_CLOSED);
    tk_lease m{};
    EXPECT_EQ(tk_acquire(cl.c, "k2", 2, 1000, 1000, &m), TK_E_CLOSED);
    EXPECT_EQ(r.count('R'), 0u);
}

TEST(V11, MinRemainingReleasesAShortGrant) {
    Granted fx(0, 901);
    ASSERT_TRUE(fx.connected);
    auto &r = fx.r;
    auto &cl = fx.cl;
    tk_acquire_opts o{sizeof o, 5000};
    tk_lease l{};
    EXPECT_EQ(tk_acquire_ex(cl.c, "k", 1, 1000, 0, &o, &l), TK_INSUFFICIENT_LEASE); // a 1 s lease never has 5 s left
    EXPECT_EQ(l.token, 0u);
    EXPECT_TRUE(eventually([&] { return r.count('R') == 1; }, std::chrono::seconds(5))) << "the grant is released";
    o.min_remaining_ms = 500;
    EXPECT_EQ(tk_acquire_ex(cl.c, "k", 1, 1000, 0, &o, &l), TK_OK);
}

TEST(V11, LeaseEndingFdFiresMarginBeforeTheDeadline) {
    tk_lease l{};
    l.deadline_ns = tk_now_ns() + 400 * 1000000ull;
    int fd = tk_lease_ending_fd(&l, 300);
    ASSERT_GE(fd, 0);
    struct pollfd p = {fd, POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, 0), 0);          // not yet
    EXPECT_EQ(poll(&p, 1, 5000), 1);       // fires (bounded wait)
    EXPECT_GE(tk_lease_remaining_ms(&l), -50);
    EXPECT_LE(tk_lease_remaining_ms(&l), 300);
    close(fd);
    l.deadline_ns = tk_now_ns() + 60000 * 1000000ull;
    l.released = 1; // a released lease has ended: readable at once
    fd = tk_lease_ending_fd(&l, 0);
    ASSERT_GE(fd, 0);
    struct pollfd q = {fd, POLLIN, 0};
    EXPECT_EQ(poll(&q, 1, 1000), 1);
    close(fd);
}

TEST(V11, RefusedArgumentsNameTheArgumentAndItsLimit) {
    Granted fx;
    ASSERT_TRUE(fx.connected);
    auto &r = fx.r;
    auto &cl = fx.cl;
    std::string big(251, 'k');
    struct Case {
        const char *name, *arg;
        std::function<tk_status(tk_lease *)> call;
    } cases[] = {
        {"empty key", "key", [&](tk_lease *l) { return tk_acquire(cl.c, "", 0, 1000, 0, l); }},
        {"251 bytes", "key", [&](tk_lease *l) { return tk_acquire(cl.c, big.data(), big.size(), 1000, 0, l); }},
        {"not UTF-8", "key", [&](tk_lease *l) { return tk_acquire(cl.c, "a\xff", 2, 1000, 0, l); }},
        {"surrogate", "key", [&](tk_lease *l) { return tk_acquire(cl.c, "\xed\xa0\x80", 3, 1000, 0, l); }},
        {"control", "key", [&](tk_lease *l) { return tk_acquire(cl.c, "a\x01", 2, 1000, 0, l); }},
        {"lease 0", "lease", [&](tk_lease *l) { return tk_acquire(cl.c, "k", 1, 0, 0, l); }},
        {"token 0", "token", [&](tk_lease *) { return tk_release_token(cl.c, "k", 1, 0, nullptr); }},
        {"release empty key", "key", [&](tk_lease *) { return tk_release_token(cl.c, "", 0, 1, nullptr); }},
        {"set of one", "keys", [&](tk_lease *l) {
             tk_key k[] = {{"a", 1}};
             return tk_acquire_set(cl.c, k, 1, 1000, 0, l);
         }},
        {"set with a duplicate", "keys[1]", [&](tk_lease *l) {
             tk_key k[] = {{"a", 1}, {"a", 1}};
             return tk_acquire_set(cl.c, k, 2, 1000, 0, l);
         }},
    };
    for (auto &c : cases) {
        SCOPED_TRACE(c.name);
        tk_lease l{};
        EXPECT_EQ(c.call(&l), TK_E_INVALID);
        std::string m = tk_errmsg();
        EXPECT_NE(m.find(c.arg), std::string::npos) << m;
        EXPECT_NE(m.find_first_of("0123456789"), std::string::npos) << m;
    }
    EXPECT_EQ(r.reqs.size(), 0u);
}

TEST(V11, CppLeaseReleaseTwiceAndEnding) {
    Recorder r;
    Fake f(granting(r));
    f.features = TK_FEAT_KEY_SETS;
    ticketing::Options o;
    o.addrs = {f.addr()};
    ticketing::Client c(o);
    auto l = c.acquire("k", std::chrono::milliseconds(1000), std::chrono::milliseconds(0));
    auto end = l.ending(std::chrono::milliseconds(200));
    EXPECT_LE(end, l.deadline());
    l.release();
    EXPECT_TRUE(l.released());
    auto ended = l.ending(std::chrono::milliseconds(200)); // released: now
    EXPECT_LE(ended, std::chrono::steady_clock::now());
    EXPECT_LT(ended, end);
    l.release(); // R6: a no-op
    EXPECT_EQ(r.count('R'), 1u);
    {
        auto s = c.acquire_set({"a", "b"}, std::chrono::milliseconds(1000), std::chrono::milliseconds(0));
        EXPECT_EQ(s.keys().size(), 2u);
    } // RAII: the set's release is an X
    EXPECT_EQ(r.count('X'), 1u);
    try {
        c.acquire("", std::chrono::milliseconds(1000), std::chrono::milliseconds(0));
        FAIL() << "empty key accepted";
    } catch (const ticketing::InvalidArgument &e) {
        EXPECT_NE(std::string(e.what()).find("key must be 1..250"), std::string::npos) << e.what();
    }
}

extern "C" uint64_t tki_full_jitter(uint64_t step); // src/util.c (internal; linked from the static library)

// R16: a reconnect's delay is uniform in [0, step] ("full jitter"), not in its upper half.
TEST(V11, ReconnectDelayIsFullJitter) {
    const uint64_t step = 400 * 1000000ull;
    int low = 0, high = 0;
    for (int i = 0; i < 10000; i++) {
        uint64_t d = tki_full_jitter(step);
        ASSERT_LE(d, step);
        low += d < step / 4;
        high += d > step * 3 / 4;
    }
    // a quarter of the step each way: 2,500 expected; half jitter would give 0 below step/4
    EXPECT_GT(low, 2000);
    EXPECT_GT(high, 2000);
    EXPECT_EQ(tki_full_jitter(0), 0u);
}
