// A scripted fake server for the failure-path tests (test_fake.cpp, test_queue.cpp).
#pragma once
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
#include "tk_wire.h"

namespace {

struct Req {
    uint8_t op = 0;
    std::string key;
    uint32_t req_id = 0;
    uint64_t arg = 0;
};

struct FakeConn {
    int fd;
    uint16_t features = 0; // §12.1 bits of the answer to the feature ping (0: a 1.0 server)
    std::string label;     // the last L received (answered O by read)
    bool read_n(uint8_t *b, size_t n) {
        size_t got = 0;
        while (got < n) {
            ssize_t r = ::recv(fd, b + got, n - got, 0);
            if (r <= 0) return false;
            got += (size_t)r;
        }
        return true;
    }
    // The next request; the feature ping and L are answered here (as a 1.1
    // server does), never returned.
    bool read(Req &q) {
        for (;;) {
            uint8_t h[16];
            if (!read_n(h, 16)) return false;
            q.op = h[0];
            q.req_id = tk_get32(h + 4);
            q.arg = tk_get64(h + 8);
            size_t n = h[0] == 'S' || h[0] == 'X' ? tk_get16(h + 2) : h[1];
            q.key.assign(n, '\0');
            if (n && !read_n((uint8_t *)&q.key[0], n)) return false;
            if (q.op == 'P' && q.arg == 1) {
                send('P', q.req_id, 0, 0, features);
                continue;
            }
            if (q.op == 'L') {
                label = q.key;
                send('O', q.req_id);
                continue;
            }
            return true;
        }
    }
    void send(uint8_t st, uint32_t id, uint64_t value = 0, uint8_t code = 0, uint16_t queued = 0, const std::string &pl = "") {
        uint8_t b[16 + 300];
        tk_resp r{st, code, queued, id, value, (const uint8_t *)pl.data(), (uint32_t)pl.size()};
        size_t n = tk_enc_resp(b, &r);
        (void)!::send(fd, b, n, MSG_NOSIGNAL);
    }
};

// Accepts connections; each runs the handshake, then script(conn).
struct Fake {
    int lfd = -1;
    int port = 0;
    std::string token;
    uint16_t features = 0; // protocol 1.1 features announced (0: a 1.0 server)
    bool bad_proof = false;
    bool reject_auth = false; // answer AUTH with REJECT AUTH_FAILED
    std::function<void(FakeConn &)> script;
    std::thread th;
    std::mutex mu;
    std::vector<std::thread> conns;
    std::vector<int> fds;
    std::atomic<bool> stop{false};
    std::atomic<int> accepted{0};
    std::atomic<int> refuse{0}; // close this many connections before HELLO

    explicit Fake(std::function<void(FakeConn &)> s, std::string tok = "") : token(std::move(tok)), script(std::move(s)) {
        lfd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        bind(lfd, (sockaddr *)&a, sizeof a);
        listen(lfd, 16);
        socklen_t l = sizeof a;
        getsockname(lfd, (sockaddr *)&a, &l);
        port = ntohs(a.sin_port);
        th = std::thread([this] {
            for (;;) {
                int fd = accept(lfd, nullptr, nullptr);
                if (fd < 0 || stop) {
                    if (fd >= 0) close(fd);
                    return;
                }
                if (refuse-- > 0) {
                    accepted++;
                    close(fd);
                    continue;
                }
                accepted++;
                std::lock_guard<std::mutex> g(mu);
                fds.push_back(fd);
                conns.emplace_back([this, fd] { serve(fd); });
            }
        });
    }
    std::string addr() const { return "127.0.0.1:" + std::to_string(port); }
    void serve(int fd) {
        FakeConn c{fd, 0, {}};
        c.features = features;
        uint8_t hello[40] = {'T', 'K', 'T', 'S', 1, (uint8_t)(token.empty() ? 0 : 1)};
        for (int i = 0; i < 32; i++) hello[8 + i] = (uint8_t)(i * 7);
        (void)!::send(fd, hello, 40, MSG_NOSIGNAL);
        uint8_t auth[72];
        if (!c.read_n(auth, 72)) return;
        uint8_t w[40] = {'K', 0, 0, 0};
        tk_put32(w + 4, 1024);
        tk_proof('s', (const uint8_t *)token.data(), token.size(), 1, hello + 8, auth + 8, w + 8);
        if (bad_proof) w[8] ^= 1;
        if (reject_auth) {
            uint8_t rej[40] = {'E', 11 /* AUTH_FAILED */};
            (void)!::send(fd, rej, 40, MSG_NOSIGNAL);
            return;
        }
        (void)!::send(fd, w, 40, MSG_NOSIGNAL);
        script(c);
    }
    ~Fake() {
        stop = true;
        shutdown(lfd, SHUT_RDWR);
        close(lfd);
        th.join();
        {
            std::lock_guard<std::mutex> g(mu);
            for (int fd : fds) shutdown(fd, SHUT_RDWR);
        }
        for (auto &t : conns) t.join();
        for (int fd : fds) close(fd);
    }
};

struct Client {
    tk_client *c;
    explicit Client(const std::vector<std::string> &addrs, const char *token = nullptr, uint32_t cto = 2000) {
        std::vector<const char *> a;
        for (auto &s : addrs) a.push_back(s.c_str());
        tk_config cfg{};
        cfg.addrs = a.data();
        cfg.n_addrs = a.size();
        cfg.token = token;
        cfg.connect_timeout_ms = cto;
        c = tk_client_new(&cfg);
    }
    ~Client() { tk_client_free(c); }
};

// Reads requests until EOF, answering each with answer(q) (no answer when it returns false).
void loop(FakeConn &c, const std::function<void(FakeConn &, const Req &)> &answer) {
    Req q;
    while (c.read(q)) answer(c, q);
}

// Checks cond every 10 ms until it holds or limit passed; returns its last value.
template <class F> bool eventually(F cond, std::chrono::milliseconds limit = std::chrono::seconds(1)) {
    for (auto end = std::chrono::steady_clock::now() + limit; !cond();) {
        if (std::chrono::steady_clock::now() >= end) return cond();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
}

// Up but silent (a stopped server): answers nothing, counts the Cs.
inline std::function<void(FakeConn &)> silent_counting_cancels(std::atomic<int> &cancels) {
    return [&cancels](FakeConn &c) {
        loop(c, [&cancels](FakeConn &, const Req &q) {
            if (q.op == 'C') cancels++;
        });
    };
}

} // namespace
