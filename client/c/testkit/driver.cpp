// Testkit driver for the C API (argument "c") and the C++ API ("cpp"):
// JSON lines on stdin/stdout (../shared/design/testkit.md). Every command
// runs on its own thread and answers once, in completion order.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ticketing.h"
#include "ticketing.hpp"

namespace {

// ---- minimal JSON
struct J {
    enum T { NUL, BOOL, NUM, STR, ARR, OBJ } t = NUL;
    bool b = false;
    double n = 0;
    long long i = 0;
    std::string s;
    std::vector<J> a;
    std::map<std::string, J> o;
    const J *get(const std::string &k) const {
        auto it = o.find(k);
        return it == o.end() ? nullptr : &it->second;
    }
};

struct Parser {
    const std::string &s;
    size_t p = 0;
    void ws() {
        while (p < s.size() && (s[p] == ' ' || s[p] == '\t' || s[p] == '\r' || s[p] == '\n')) p++;
    }
    bool str(std::string &out) {
        if (s[p] != '"') return false;
        p++;
        while (p < s.size() && s[p] != '"') {
            char c = s[p++];
            if (c != '\\') {
                out += c;
                continue;
            }
            if (p >= s.size()) return false;
            char e = s[p++];
            switch (e) {
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'u': {
                if (p + 4 > s.size()) return false;
                unsigned cp = (unsigned)std::stoul(s.substr(p, 4), nullptr, 16);
                p += 4;
                if (cp >= 0xD800 && cp < 0xDC00 && p + 6 <= s.size() && s[p] == '\\' && s[p + 1] == 'u') {
                    unsigned lo = (unsigned)std::stoul(s.substr(p + 2, 4), nullptr, 16);
                    p += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                if (cp < 0x80) out += (char)cp;
                else if (cp < 0x800) {
                    out += (char)(0xC0 | (cp >> 6));
                    out += (char)(0x80 | (cp & 0x3F));
                } else if (cp < 0x10000) {
                    out += (char)(0xE0 | (cp >> 12));
                    out += (char)(0x80 | ((cp >> 6) & 0x3F));
                    out += (char)(0x80 | (cp & 0x3F));
                } else {
                    out += (char)(0xF0 | (cp >> 18));
                    out += (char)(0x80 | ((cp >> 12) & 0x3F));
                    out += (char)(0x80 | ((cp >> 6) & 0x3F));
                    out += (char)(0x80 | (cp & 0x3F));
                }
                break;
            }
            default: out += e;
            }
        }
        if (p >= s.size()) return false;
        p++;
        return true;
    }
    bool val(J &v) {
        ws();
        if (p >= s.size()) return false;
        char c = s[p];
        if (c == '{') {
            v.t = J::OBJ;
            p++;
            ws();
            if (p < s.size() && s[p] == '}') {
                p++;
                return true;
            }
            for (;;) {
                ws();
                std::string k;
                if (p >= s.size() || !str(k)) return false;
                ws();
                if (p >= s.size() || s[p] != ':') return false;
                p++;
                if (!val(v.o[k])) return false;
                ws();
                if (p < s.size() && s[p] == ',') {
                    p++;
                    continue;
                }
                if (p < s.size() && s[p] == '}') {
                    p++;
                    return true;
                }
                return false;
            }
        }
        if (c == '[') {
            v.t = J::ARR;
            p++;
            ws();
            if (p < s.size() && s[p] == ']') {
                p++;
                return true;
            }
            for (;;) {
                v.a.emplace_back();
                if (!val(v.a.back())) return false;
                ws();
                if (p < s.size() && s[p] == ',') {
                    p++;
                    continue;
                }
                if (p < s.size() && s[p] == ']') {
                    p++;
                    return true;
                }
                return false;
            }
        }
        if (c == '"') {
            v.t = J::STR;
            return str(v.s);
        }
        if (s.compare(p, 4, "true") == 0) {
            v.t = J::BOOL;
            v.b = true;
            p += 4;
            return true;
        }
        if (s.compare(p, 5, "false") == 0) {
            v.t = J::BOOL;
            p += 5;
            return true;
        }
        if (s.compare(p, 4, "null") == 0) {
            p += 4;
            return true;
        }
        size_t st = p;
        while (p < s.size() && (isdigit((unsigned char)s[p]) || s[p] == '-' || s[p] == '+' || s[p] == '.' || s[p] == 'e' || s[p] == 'E')) p++;
        if (st == p) return false;
        v.t = J::NUM;
        v.n = std::strtod(s.c_str() + st, nullptr);
        v.i = std::strtoll(s.c_str() + st, nullptr, 10);
        return true;
    }
};

std::string esc(const std::string &s) {
    std::string o = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            o += '\\';
            o += (char)c;
        } else if (c < 0x20) {
            char b[8];
            snprintf(b, sizeof b, "\\u%04x", c);
            o += b;
        } else {
            o += (char)c;
        }
    }
    return o + "\"";
}

std::mutex out_mu;
void emit(const std::string &line) {
    std::lock_guard<std::mutex> g(out_mu);
    fwrite(line.data(), 1, line.size(), stdout);
    fputc('\n', stdout);
    fflush(stdout);
}

std::string ok(long long id, const std::string &extra = "") {
    return "{\"id\":" + std::to_string(id) + ",\"ok\":true" + extra + "}";
}

const char *kind(tk_status s) {
    switch (s) {
    case TK_TIMEOUT: return "timeout";
    case TK_BUSY: return "busy";
    case TK_INDETERMINATE: return "indeterminate";
    case TK_NOT_HOLDER: return "not_holder";
    case TK_E_AUTH: return "auth";
    case TK_E_TLS: return "tls";
    case TK_E_CONNECT: return "connect";
    case TK_E_INVALID: return "invalid";
    case TK_E_PROTOCOL: return "protocol";
    case TK_E_CANCELLED: return "cancelled";
    case TK_E_CLOSED: return "closed";
    case TK_E_NO_LEADER: return "busy";
    default: return "internal";
    }
}

std::string err(long long id, tk_status s, int code, const std::string &msg) {
    if (s == TK_E_NO_LEADER && code == 0) code = TK_CODE_NO_QUORUM;
    std::string r = "{\"id\":" + std::to_string(id) + ",\"ok\":false,\"error\":\"" + kind(s) + "\"";
    if (code) r += ",\"code\":" + std::to_string(code);
    return r + ",\"message\":" + esc(msg.empty() ? tk_strerror(s) : msg) + "}";
}

bool use_cpp = false;
bool use_queue = false; // c-queue: TESTKIT_VARIANT=queue (testkit README "Variants")

// c-queue: one event-loop thread owns a tk_queue; command threads post their
// acquire, release or cancel to it and wait for the op's event.
struct QueueLoop {
    struct Req {
        int kind; // TK_EV_ACQUIRE, TK_EV_RELEASE, 0 = cancel
        long long id;
        std::string key;
        uint32_t lease = 0, wait = 0;
        uint64_t token = 0;
        std::promise<tk_event> done;
    };
    tk_queue *q = nullptr;
    int efd = -1;
    std::mutex m;
    std::vector<std::shared_ptr<Req>> inbox;
    std::atomic<bool> stop{false};
    std::thread th;

    explicit QueueLoop(tk_client *c) : q(tk_queue_new(c)), efd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
        th = std::thread([this] { loop(); });
    }
    ~QueueLoop() {
        stop = true;
        uint64_t one = 1;
        (void)!write(efd, &one, sizeof one);
        th.join();
        close(efd);
    }
    tk_event post(std::shared_ptr<Req> r) {
        auto f = r->done.get_future();
        {
            std::lock_guard<std::mutex> g(m);
            inbox.push_back(r);
        }
        uint64_t one = 1;
        (void)!write(efd, &one, sizeof one);
        return r->kind ? f.get() : tk_event{};
    }
    static tk_event failed(tk_status s) {
        tk_event e{};
        e.status = s;
        return e;
    }
    void loop() {
        std::map<long long, std::pair<tk_op *, std::shared_ptr<Req>>> live;
        while (!stop) {
            struct pollfd p[2] = {{tk_queue_fd(q), POLLIN, 0}, {efd, POLLIN, 0}};
            poll(p, 2, tk_queue_timeout_ms(q));
            uint64_t n;
            (void)!read(efd, &n, sizeof n);
            std::vector<std::shared_ptr<Req>> in;
            {
                std::lock_guard<std::mutex> g(m);
                in.swap(inbox);
            }
            for (auto &r : in) {
                if (r->kind == 0) {
                    if (auto it = live.find(r->id); it != live.end() && it->second.first) tk_queue_cancel(q, it->second.first);
                    continue;
                }
                tk_op *op = nullptr;
                tk_status s = r->kind == TK_EV_ACQUIRE
                                  ? tk_queue_acquire(q, r->key.data(), r->key.size(), r->lease, r->wait, r.get(), &op)
                                  : tk_queue_release_token(q, r->key.data(), r->key.size(), r->token, r.get());
                if (s != TK_OK) {
                    r->done.set_value(failed(s));
                    continue;
                }
                live[r->id] = {op, r};
            }
            tk_event ev[64];
            size_t got;
            while ((got = tk_queue_poll(q, ev, 64)) > 0) {
                for (size_t i = 0; i < got; i++) {
                    auto *r = static_cast<Req *>(ev[i].user);
                    auto keep = live[r->id].second;
                    live.erase(r->id);
                    r->done.set_value(ev[i]);
                }
                if (got < 64) break;
            }
        }
        tk_queue_free(q);
        for (auto &kv : live) kv.second.second->done.set_value(failed(TK_E_CLOSED));
    }
};

// The one client; shared_ptr so that commands in flight keep it alive across a reconnect.
struct Conn {
    tk_client *c = nullptr;                         // C mode
    std::unique_ptr<ticketing::Client> cpp;          // C++ mode
    std::unique_ptr<QueueLoop> ql;                   // c-queue
    tk_client *raw() const { return cpp ? cpp->native() : c; }
    ~Conn() {
        ql.reset(); // the queue before its client
        if (c) tk_client_free(c);
    }
};
std::mutex mu;
std::shared_ptr<Conn> cur;
std::map<long long, tk_op *> pending_c;                          // acquire id -> op (C mode)
std::map<long long, ticketing::PendingAcquire *> pending_cpp;     // (C++ mode)

bool key_of(const J &cmd, std::string &key) {
    if (const J *h = cmd.get("key_hex"); h && h->t == J::STR) {
        const std::string &x = h->s;
        if (x.size() % 2) return false;
        for (size_t i = 0; i < x.size(); i += 2) key += (char)std::stoi(x.substr(i, 2), nullptr, 16);
        return true;
    }
    if (const J *k = cmd.get("key"); k && k->t == J::STR) key = k->s;
    return true;
}

long long num(const J &cmd, const char *k, long long d = 0) {
    const J *v = cmd.get(k);
    return v && v->t == J::NUM ? v->i : d;
}

bool range_ok(long long v) { return v >= 0 && v <= 0xffffffffLL; }

std::string grant(long long id, uint64_t token, int64_t remaining) {
    return ok(id, ",\"token\":\"" + std::to_string(token) + "\",\"deadline_in_ms\":" + std::to_string(remaining));
}

std::string do_connect(const J &cmd, long long id) {
    std::shared_ptr<Conn> old;
    {
        std::lock_guard<std::mutex> g(mu);
        old = cur;
        cur.reset();
    }
    if (old) tk_client_close(old->raw());
    std::vector<std::string> addrs;
    if (const J *a = cmd.get("addrs"))
        for (auto &x : a->a) addrs.push_back(x.s);
    std::string token;
    if (const J *t = cmd.get("token"); t && t->t == J::STR) token = t->s;
    const J *tls = cmd.get("tls");
    bool has_tls = tls && tls->t == J::OBJ;
    auto field = [&](const char *k) {
        const J *v = has_tls ? tls->get(k) : nullptr;
        return v && v->t == J::STR ? v->s : std::string();
    };
    long long cto = num(cmd, "connect_timeout_ms", 0);
    long long allowance = num(cmd, "answer_allowance_ms", 0);
    auto conn = std::make_shared<Conn>();
    if (use_cpp) {
        ticketing::Options o;
        o.addrs = addrs;
        o.token = token;
        if (has_tls) o.tls = ticketing::TlsOptions{field("ca"), field("cert"), field("key"), field("server_name")};
        if (cto > 0) o.connect_timeout = std::chrono::milliseconds(cto);
        if (allowance > 0) o.answer_allowance = std::chrono::milliseconds(allowance);
        o.on_release_error = [](const ticketing::Error &e) { fprintf(stderr, "driver: release failed: %s\n", e.what()); };
        try {
            conn->cpp = std::make_unique<ticketing::Client>(o);
        } catch (const ticketing::Error &e) {
            tk_status s = e.status() == TK_E_INVALID && has_tls ? TK_E_TLS : e.status();
            return err(id, s, e.code(), e.what());
        }
    } else {
        std::vector<const char *> a;
        for (auto &s : addrs) a.push_back(s.c_str());
        std::string ca = field("ca"), cert = field("cert"), key = field("key"), sn = field("server_name");
        tk_tls_config t{};
        t.ca_file = ca.empty() ? nullptr : ca.c_str();
        t.cert_file = cert.empty() ? nullptr : cert.c_str();
        t.key_file = key.empty() ? nullptr : key.c_str();
        t.server_name = sn.empty() ? nullptr : sn.c_str();
        tk_config cfg{};
        cfg.addrs = a.data();
        cfg.n_addrs = a.size();
        cfg.token = token.c_str();
        cfg.tls = has_tls ? &t : nullptr;
        cfg.connect_timeout_ms = cto > 0 ? (uint32_t)cto : 0;
        cfg.answer_allowance_ms = allowance > 0 ? (uint32_t)allowance : 0; // edge rule R2
        conn->c = tk_client_new(&cfg);
        if (!conn->c) return err(id, has_tls ? TK_E_TLS : TK_E_INVALID, 0, "invalid configuration");
        tk_status s = tk_client_wait_connected(conn->c, 0);
        if (s != TK_OK) {
            uint8_t code = 0;
            tk_client_last_error(conn->c, &code);
            return err(id, s, code, "");
        }
        if (use_queue) conn->ql = std::make_unique<QueueLoop>(conn->c);
    }
    std::lock_guard<std::mutex> g(mu);
    cur = conn;
    return ok(id);
}

std::string do_acquire(std::shared_ptr<Conn> cn, const J &cmd, long long id, const std::string &key) {
    long long lease = num(cmd, "lease_ms"), wait = num(cmd, "wait_ms");
    if (!range_ok(lease) || !range_ok(wait)) return err(id, TK_E_INVALID, 0, "duration out of range");
    if (use_cpp) {
        try {
            auto pa = cn->cpp->start_acquire(key, std::chrono::milliseconds(lease), std::chrono::milliseconds(wait));
            {
                std::lock_guard<std::mutex> g(mu);
                pending_cpp[id] = &pa;
            }
            std::optional<ticketing::Lease> l;
            std::string res;
            try {
                l.emplace(pa.wait());
            } catch (const ticketing::Error &e) {
                res = err(id, e.status(), e.code(), e.what());
            }
            {
                std::lock_guard<std::mutex> g(mu);
                pending_cpp.erase(id);
            }
            if (!l) return res;
            uint64_t tok = l->token();
            int64_t rem = l->remaining().count();
            l->detach(); // the runner owns the lock now and releases it by token
            return grant(id, tok, rem);
        } catch (const ticketing::Error &e) {
            return err(id, e.status(), e.code(), e.what());
        }
    }
    if (cn->ql) {
        auto r = std::make_shared<QueueLoop::Req>();
        r->kind = TK_EV_ACQUIRE;
        r->id = id;
        r->key = key;
        r->lease = (uint32_t)lease;
        r->wait = (uint32_t)wait;
        tk_event ev = cn->ql->post(r);
        if (ev.status != TK_OK) return err(id, ev.status, ev.lease.code, ev.lease.message);
        return grant(id, ev.lease.token, tk_lease_remaining_ms(&ev.lease));
    }
    tk_op *op = nullptr;
    tk_status s = tk_acquire_start(cn->c, key.data(), key.size(), (uint32_t)lease, (uint32_t)wait, &op);
    if (s != TK_OK) return err(id, s, 0, "");
    {
        std::lock_guard<std::mutex> g(mu);
        pending_c[id] = op;
    }
    tk_lease l{};
    s = tk_op_wait(op, &l);
    {
        std::lock_guard<std::mutex> g(mu);
        pending_c.erase(id);
    }
    tk_op_free(op);
    if (s != TK_OK) return err(id, s, l.code, l.message);
    return grant(id, l.token, tk_lease_remaining_ms(&l));
}

std::string do_release(std::shared_ptr<Conn> cn, const J &cmd, long long id, const std::string &key) {
    const J *t = cmd.get("token");
    if (!t || t->t != J::STR) return err(id, TK_E_INVALID, 0, "release without token");
    char *end = nullptr;
    errno = 0;
    unsigned long long tok = strtoull(t->s.c_str(), &end, 10);
    if (errno || !end || *end || t->s.empty()) return err(id, TK_E_INVALID, 0, "bad token");
    if (use_cpp) {
        try {
            cn->cpp->release(key, tok);
            return ok(id);
        } catch (const ticketing::Error &e) {
            return err(id, e.status(), e.code(), e.what());
        }
    }
    if (cn->ql) {
        auto r = std::make_shared<QueueLoop::Req>();
        r->kind = TK_EV_RELEASE;
        r->id = id;
        r->key = key;
        r->token = tok;
        tk_event ev = cn->ql->post(r);
        if (ev.status != TK_OK) return err(id, ev.status, ev.lease.code, ev.lease.message);
        return ok(id);
    }
    uint8_t code = 0;
    tk_status s = tk_release_token(cn->c, key.data(), key.size(), tok, &code);
    if (s != TK_OK) return err(id, s, code, "");
    return ok(id);
}

struct ScopeFailed {};

std::string do_with_lock(std::shared_ptr<Conn> cn, const J &cmd, long long id, const std::string &key) {
    long long lease = num(cmd, "lease_ms"), wait = num(cmd, "wait_ms"), hold = num(cmd, "hold_ms");
    const J *f = cmd.get("fail");
    bool fail = f && f->t == J::BOOL && f->b;
    if (!range_ok(lease) || !range_ok(wait)) return err(id, TK_E_INVALID, 0, "duration out of range");
    if (use_cpp) {
        uint64_t tok = 0;
        try {
            // RAII scope: the Lease's destructor releases on normal and failing exit.
            ticketing::Lease l = cn->cpp->acquire(key, std::chrono::milliseconds(lease), std::chrono::milliseconds(wait));
            tok = l.token();
            std::this_thread::sleep_for(std::chrono::milliseconds(hold));
            if (fail) throw ScopeFailed{};
        } catch (const ScopeFailed &) {
        } catch (const ticketing::Error &e) {
            return err(id, e.status(), e.code(), e.what());
        }
        return ok(id, ",\"token\":\"" + std::to_string(tok) + "\"");
    }
    if (cn->ql) { // acquire, hold, release: each through the queue
        auto a = std::make_shared<QueueLoop::Req>();
        a->kind = TK_EV_ACQUIRE;
        a->id = id;
        a->key = key;
        a->lease = (uint32_t)lease;
        a->wait = (uint32_t)wait;
        tk_event ev = cn->ql->post(a);
        if (ev.status != TK_OK) return err(id, ev.status, ev.lease.code, ev.lease.message);
        std::this_thread::sleep_for(std::chrono::milliseconds(hold));
        auto r = std::make_shared<QueueLoop::Req>();
        r->kind = TK_EV_RELEASE;
        r->id = -id - 1000000;
        r->key = key;
        r->token = ev.lease.token;
        tk_event rev = cn->ql->post(r);
        if (rev.status != TK_OK) fprintf(stderr, "driver: with_lock release: %s\n", tk_strerror(rev.status));
        return ok(id, ",\"token\":\"" + std::to_string(ev.lease.token) + "\"");
    }
    tk_lease l{};
    tk_status s = tk_acquire(cn->c, key.data(), key.size(), (uint32_t)lease, (uint32_t)wait, &l);
    if (s != TK_OK) return err(id, s, l.code, l.message);
    std::this_thread::sleep_for(std::chrono::milliseconds(hold));
    (void)fail; // C has no exceptions: the failing path takes the same cleanup
    s = tk_release(cn->c, &l);
    if (s != TK_OK) fprintf(stderr, "driver: with_lock release: %s\n", tk_strerror(s));
    return ok(id, ",\"token\":\"" + std::to_string(l.token) + "\"");
}

std::string run(const J &cmd, long long id, const std::string &name) {
    if (name == "connect") return do_connect(cmd, id);
    if (name == "info")
        return ok(id, std::string(",\"language\":\"") + (use_cpp ? "cpp" : use_queue ? "c-queue" : "c") + "\",\"client_version\":\"" TK_VERSION
                      "\",\"runtime\":" + esc(std::string(use_cpp ? "C++17 " : "C99 ") + "gcc " __VERSION__) );
    if (name == "cancel") {
        long long target = num(cmd, "target", -1);
        std::lock_guard<std::mutex> g(mu);
        if (auto it = pending_c.find(target); it != pending_c.end()) tk_op_cancel(it->second);
        if (auto it = pending_cpp.find(target); it != pending_cpp.end()) it->second->cancel();
        if (cur && cur->ql) {
            auto r = std::make_shared<QueueLoop::Req>();
            r->kind = 0;
            r->id = target;
            cur->ql->post(r);
        }
        return ok(id);
    }
    std::shared_ptr<Conn> cn;
    {
        std::lock_guard<std::mutex> g(mu);
        cn = cur;
    }
    if (name == "close") {
        if (cn) tk_client_close(cn->raw());
        return ok(id);
    }
    if (!cn) return err(id, TK_E_CLOSED, 0, "not connected");
    std::string key;
    if (!key_of(cmd, key)) return err(id, TK_E_INVALID, 0, "bad key_hex");
    if (name == "acquire") return do_acquire(cn, cmd, id, key);
    if (name == "release") return do_release(cn, cmd, id, key);
    if (name == "with_lock") return do_with_lock(cn, cmd, id, key);
    return "{\"id\":" + std::to_string(id) + ",\"ok\":false,\"error\":\"internal\",\"message\":\"unknown cmd\"}";
}

} // namespace

int main(int argc, char **argv) {
    use_cpp = argc > 1 && std::strcmp(argv[1], "cpp") == 0;
    const char *variant = getenv("TESTKIT_VARIANT");
    use_queue = !use_cpp && variant && std::strcmp(variant, "queue") == 0;
    std::atomic<int> running{0};
    std::mutex dmu;
    std::condition_variable dcv;
    std::string line;
    while (std::getline(std::cin, line)) {
        if (line.empty()) continue;
        auto cmd = std::make_shared<J>();
        Parser p{line};
        if (!p.val(*cmd) || cmd->t != J::OBJ) {
            fprintf(stderr, "driver: bad line\n");
            continue;
        }
        long long id = num(*cmd, "id", -1);
        const J *c = cmd->get("cmd");
        std::string name = c && c->t == J::STR ? c->s : "";
        if (name == "cancel" || name == "info") { // answered at once
            emit(run(*cmd, id, name));
            continue;
        }
        running++;
        std::thread([cmd, id, name, &running, &dmu, &dcv] {
            std::string r = run(*cmd, id, name);
            emit(r);
            std::lock_guard<std::mutex> g(dmu);
            running--;
            dcv.notify_all();
        }).detach();
    }
    std::shared_ptr<Conn> cn;
    {
        std::lock_guard<std::mutex> g(mu);
        cn = cur;
    }
    if (cn) tk_client_close(cn->raw());
    std::unique_lock<std::mutex> g(dmu);
    dcv.wait_for(g, std::chrono::seconds(10), [&] { return running.load() == 0; });
    return 0;
}
