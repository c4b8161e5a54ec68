// Unit tests against a scripted fake server (failure paths).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ticketing.h"
#include "ticketing.hpp"
#include "tk_wire.h"
#include "fake.hpp"

TEST(Fake, GrantCarriesTokenAndQueuedDeadline) {
    Fake f([](FakeConn &c) {
        loop(c, [](FakeConn &c, const Req &q) {
            if (q.op == 'A') c.send('G', q.req_id, 0xFFFFFFFFFFFFFFF0ull, 0, 625);
            if (q.op == 'R') c.send(q.arg == 0xFFFFFFFFFFFFFFF0ull ? 'O' : 'N', q.req_id);
        });
    });
    Client cl({f.addr()});
    ASSERT_EQ(tk_client_wait_connected(cl.c, 0), TK_OK);
    tk_lease l;
    uint64_t before = tk_now_ns();
    ASSERT_EQ(tk_acquire(cl.c, "k", 1, 1000, 0, &l), TK_OK);
    EXPECT_EQ(l.token, 0xFFFFFFFFFFFFFFF0ull); // above 2^53, exact
    EXPECT_GE(l.deadline_ns, before + 10000ull * 1000000 + 1000ull * 1000000);
    EXPECT_LE(l.deadline_ns, tk_now_ns() + 11000ull * 1000000);
    EXPECT_EQ(tk_release(cl.c, &l), TK_OK);
}

TEST(Fake, ErrorAnswersAreInvalidWithCode) {
    Fake f([](FakeConn &c) { loop(c, [](FakeConn &c, const Req &q) { c.send('E', q.req_id, 0, TK_CODE_BAD_LEASE, 0, "lease too long"); }); });
    Client cl({f.addr()});
    ASSERT_EQ(tk_client_wait_connected(cl.c, 0), TK_OK);
    tk_lease l;
    EXPECT_EQ(tk_acquire(cl.c, "k", 1, 1000, 0, &l), TK_E_INVALID);
    EXPECT_EQ(l.code, TK_CODE_BAD_LEASE);
    // R15: the op, the key and the server, then the server's text and its code once
    std::string want = "acquire \"k\" at " + f.addr() + ": lease too long (BAD_LEASE)";
    EXPECT_EQ(std::string(l.message), want);
    EXPECT_EQ(std::string(tk_errmsg()), want);
}

TEST(Fake, DuplicateReqIdErrorNeverCompletes) {
    Fake f([](FakeConn &c) {
        loop(c, [](FakeConn &c, const Req &q) {
            c.send('E', q.req_id, 0, TK_CODE_DUPLICATE_REQ_ID);
            c.send('G', q.req_id, 77);
        });
    });
    Client cl({f.addr()});
    ASSERT_EQ(tk_client_wait_connected(cl.c, 0), TK_OK);
    tk_lease l;
    ASSERT_EQ(tk_acquire(cl.c, "k", 1, 1000, 0, &l), TK_OK);
    EXPECT_EQ(l.token, 77u);
}

TEST(Fake, ProtocolViolationKillsConnection) {
    Fake f([](FakeConn &c) {
        Req q;
        if (c.read(q)) {
            uint8_t junk[16] = {'Z'};
            (void)!::send(c.fd, junk, 16, MSG_NOSIGNAL);
        }
        loop(c, [](FakeConn &, const Req &) {});
    });
    Client cl({f.addr()});
    ASSERT_EQ(tk_client_wait_connected(cl.c, 0), TK_OK);
    tk_lease l;
    EXPECT_EQ(tk_acquire(cl.c, "k", 1, 1000, 1000, &l), TK_INDETERMINATE);
}

TEST(Fake, MutualProofAccepted) {
    Fake f([](FakeConn &c) { loop(c, [](FakeConn &c, const Req &q) { c.send('G', q.req_id, 5); }); }, "s3cret");
    Client cl({f.addr()}, "s3cret");
    ASSERT_EQ(tk_client_wait_connected(cl.c, 0), TK_OK);
    tk_lease l;
    EXPECT_EQ(tk_acquire(cl.c, "k", 1, 1000, 0, &l), TK_OK);
}

TEST(Fake, ReleaseRetriedAfterLostConnectionThenConfirmed) {
    std::atomic<int> rels{0};
    Fake f([&](FakeConn &c) {
        loop(c, [&](FakeConn &c, const Req &q) {
            if (q.op != 'R') return;
            if (rels++ == 0) {
                shutdown(c.fd, SHUT_RDWR);
                return;
            }
            c.send('O', q.req_id);
        });
    });
    Client cl({f.addr()});
    ASSERT_EQ(tk_client_wait_connected(cl.c, 0), TK_OK);
    EXPECT_EQ(tk_release_token(cl.c, "k", 1, 7, nullptr), TK_OK);
    EXPECT_EQ(rels.load(), 2);
}

TEST(Fake, NotHolderAfterUnconfirmedAttemptIsIndeterminate) {
    std::atomic<int> rels{0};
    Fake f([&](FakeConn &c) {
        loop(c, [&](FakeConn &c, const Req &q) {
            if (q.op != 'R') return;
            if (rels++ == 0) {
                shutdown(c.fd, SHUT_RDWR);
                return;
            }
            c.send('N', q.req_id);
        });
    });
    Client cl({f.addr()});
    ASSERT_EQ(tk_client_wait_connected(cl.c, 0), TK_OK);
    EXPECT_EQ(tk_release_token(cl.c, "k", 1, 7, nullptr), TK_INDETERMINATE);
}

TEST(Fake, ReconnectsAfterLoss) {
    Fake f([&](FakeConn &c) { loop(c, [](FakeConn &c, const Req &q) { c.send('G', q.req_id, 1); }); });
    f.refuse = 4; // both connections fail twice, then back off 0.1 s, 0.2 s
    Client cl({f.addr()});
    tk_lease l;
    EXPECT_EQ(tk_acquire(cl.c, "k", 1, 1000, 3000, &l), TK_OK);
    EXPECT_GE(f.accepted.load(), 3);
}

TEST(Fake, ConnectFailureWithinBudget) {
    Client cl({"127.0.0.1:1"}, nullptr, 300);
    tk_lease l;
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(tk_acquire(cl.c, "k", 1, 1000, 200, &l), TK_E_CONNECT);
    EXPECT_LE(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
}

TEST(Fake, BadArgumentsBeforeSending) {
    Client cl({"127.0.0.1:1"}, nullptr, 300);
    tk_lease l;
    EXPECT_EQ(tk_acquire(cl.c, "", 0, 1000, 0, &l), TK_E_INVALID);
    EXPECT_EQ(tk_acquire(cl.c, "a\x01", 2, 1000, 0, &l), TK_E_INVALID);
    EXPECT_EQ(tk_acquire(cl.c, "k", 1, 0, 0, &l), TK_E_INVALID);
    std::string big(251, 'k');
    EXPECT_EQ(tk_acquire(cl.c, big.data(), big.size(), 1000, 0, &l), TK_E_INVALID);
    EXPECT_EQ(tk_release_token(cl.c, "k", 1, 0, nullptr), TK_E_INVALID) << "R8: token 0";
    tk_config bad{};
    EXPECT_EQ(tk_client_new(&bad), nullptr);
    const char *a[] = {"nocolon"};
    bad.addrs = a;
    bad.n_addrs = 1;
    EXPECT_EQ(tk_client_new(&bad), nullptr);
}

TEST(FakeCpp, LeaseDestructorReleasesAndErrorsGoToCallback) {
    std::atomic<int> rels{0};
    Fake f([&](FakeConn &c) {
        loop(c, [&](FakeConn &c, const Req &q) {
            if (q.op == 'A') c.send(q.key == "held" ? 'T' : 'G', q.req_id, 10);
            if (q.op == 'R') {
                rels++;
                c.send('N', q.req_id);
            }
        });
    });
    std::vector<std::string> errs;
    ticketing::Options o;
    o.addrs = {f.addr()};
    o.on_release_error = [&](const ticketing::Error &e) { errs.push_back(e.what()); };
    ticketing::Client cl(o);
    {
        auto l = cl.acquire("k", std::chrono::milliseconds(1000), std::chrono::milliseconds(0));
        EXPECT_EQ(l.token(), 10u);
        ticketing::Lease moved = std::move(l);
        EXPECT_FALSE(l.held());
        EXPECT_TRUE(moved.held());
    }
    EXPECT_EQ(rels.load(), 1);
    EXPECT_EQ(errs.size(), 1u);
    EXPECT_FALSE(cl.try_acquire("held", std::chrono::milliseconds(1000)).has_value());
    auto l2 = cl.acquire("k", std::chrono::milliseconds(1000), std::chrono::milliseconds(0));
    EXPECT_THROW(l2.release(), ticketing::NotHolderError);
    EXPECT_THROW(cl.acquire("", std::chrono::milliseconds(1000), std::chrono::milliseconds(0)), ticketing::InvalidArgument);
    EXPECT_THROW(cl.acquire("k", std::chrono::milliseconds(-1), std::chrono::milliseconds(0)), ticketing::InvalidArgument);
}

// R2: the allowance is one setting, counted from the write.
TEST(Fake, AnswerAllowanceIsOneSetting) {
    std::atomic<int> cancels{0};
    Fake f(silent_counting_cancels(cancels));
    std::string addr = f.addr();
    const char *a[] = {addr.c_str()};
    tk_config cfg = TK_CONFIG_INIT;
    cfg.addrs = a;
    cfg.n_addrs = 1;
    cfg.answer_allowance_ms = 400;
    tk_client *c = tk_client_new(&cfg);
    ASSERT_NE(c, nullptr);
    ASSERT_EQ(tk_client_wait_connected(c, 0), TK_OK);
    tk_lease l;
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(tk_acquire(c, "k", 1, 1000, 300, &l), TK_INDETERMINATE);
    auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_GE(took, std::chrono::milliseconds(700));
    EXPECT_LT(took, std::chrono::milliseconds(3300)) << "the configured 400 ms, not the 3 s default";
    eventually([&] { return cancels > 0; });
    tk_client_free(c);
}

// Finding 8: a NULL out would throw the token away; refused before sending.
TEST(Fake, AcquireWithoutOutIsRefused) {
    std::atomic<int> reqs{0};
    Fake f([&](FakeConn &c) {
        loop(c, [&](FakeConn &c, const Req &q) {
            reqs++;
            c.send('G', q.req_id, 7);
        });
    });
    Client cl({f.addr()});
    ASSERT_EQ(tk_client_wait_connected(cl.c, 0), TK_OK);
    EXPECT_EQ(tk_acquire(cl.c, "k", 1, 1000, 0, nullptr), TK_E_INVALID);
    EXPECT_EQ(reqs.load(), 0) << "nothing sent";
}

// Finding 7: a missing CA file is named.
TEST(Fake, MissingCaFileIsNamed) {
    const char *a[] = {"127.0.0.1:1"};
    tk_tls_config t = TK_TLS_CONFIG_INIT;
    t.ca_file = "/nonexistent/tk-ca.pem";
    tk_config cfg = TK_CONFIG_INIT;
    cfg.addrs = a;
    cfg.n_addrs = 1;
    cfg.tls = &t;
    EXPECT_EQ(tk_client_new(&cfg), nullptr);
    EXPECT_EQ(errno, EINVAL);
    std::string why = tk_client_new_error();
    EXPECT_NE(why.find("/nonexistent/tk-ca.pem"), std::string::npos) << why;
    EXPECT_NE(why.find("No such file"), std::string::npos) << why;
}

// Finding 8: the library's version at run time.
TEST(Fake, RuntimeVersion) {
    EXPECT_STREQ(tk_version(), TK_VERSION);
    EXPECT_EQ(tk_version_number(), (unsigned)TK_VERSION_NUMBER);
}
