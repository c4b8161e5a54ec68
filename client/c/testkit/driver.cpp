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
    case TK_INSUFFICIENT_LEASE: return "insufficient_lease";
    case TK_E_UNSUPPORTED: return "unsupported";
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

// stdin ended: open scopes (with_lock) end now and release (R10)
std::mutex xmu;
std::condition_variable xcv;
bool exiting = false;
int scopes = 0;
void hold(long long ms) {
    std::unique_lock<std::mutex> g(xmu);
    xcv.wait_for(g, std::chrono::milliseconds(ms), [] { return exiting; });
}
struct Scope {
    Scope() {
        std::lock_guard<std::mutex> g(xmu);
        scopes++;
    }
    ~Scope() {
        std::lock_guard<std::mutex> g(xmu);
        scopes--;
        xcv.notify_all();
    }
};

// c-queue: one event-loop thread owns a tk_queue; command threads post their
// acquire, release or cancel to it and wait for the op's event.
struct QueueLoop {
    struct Req {
        int kind; // TK_EV_ACQUIRE, TK_EV_RELEASE, 0 = cancel
        long long id;
        std::string key;
        std::vector<std::string> keys; // a key set
        uint32_t lease = 0, wait = 0, min_remaining = 0;
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
                tk_status s;
                std::vector<tk_key> ks;
                for (auto &k : r->keys) ks.push_back(tk_key{k.data(), k.size()});
                tk_acquire_opts o{sizeof(tk_acquire_opts), r->min_remaining};
                if (!ks.empty())
                    s = r->kind == TK_EV_ACQUIRE ? tk_queue_acquire_set(q, ks.data(), ks.size(), r->lease, r->wait, r.get(), &op)
                                                 : tk_queue_release_set(q, ks.data(), ks.size(), r->token, r.get());
                else
                    s = r->kind == TK_EV_ACQUIRE
                            ? tk_queue_acquire_ex(q, r->key.data(), r->key.size(), r->lease, r->wait, &o, r.get(), &op)
                            : tk_queue_release_token(q, r->key.data(), r->key.size(), r->token, r.get());
                if (s != TK_OK) {
                    tk_event e = failed(s);
                    snprintf(e.lease.message, sizeof e.lease.message, "%s", tk_errmsg());
                    r->done.set_value(e);
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
// Lease objects by token (release_lease, lease_ending): the C lease, or the C++ one.
struct LeaseObj {
    tk_lease c{};
    std::unique_ptr<ticketing::Lease> cpp;
};
std::map<uint64_t, std::shared_ptr<LeaseObj>> leases;
void keep(const tk_lease &l) {
    auto o = std::make_shared<LeaseObj>();
    o->c = l;
    std::lock_guard<std::mutex> g(mu);
    leases[l.token] = o;
}
void keep(ticketing::Lease &&l) {
    auto o = std::make_shared<LeaseObj>();
    o->c = l.native();
    o->cpp = std::make_unique<ticketing::Lease>(std::move(l));
    std::lock_guard<std::mutex> g(mu);
    leases[o->c.token] = o;
}
std::shared_ptr<LeaseObj> lease_of(uint64_t token) {
    std::lock_guard<std::mutex> g(mu);
    auto it = leases.find(token);
    return it == leases.end() ? nullptr : it->second;
}

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

// The C API takes uint32_t ms: what does not fit is refused here, as the
// type system refuses it in a C program (R8: the argument and its limit).
std::string bad_ms(long long id, const char *what, long long v, long long min) {
    return err(id, TK_E_INVALID, 0,
               std::string(what) + " must be " + std::to_string(min) + "..4294967295 ms (got " + std::to_string(v) + ")");
}

std::string grant(long long id, uint64_t token, int64_t remaining) {
    return ok(id, ",\"token\":\"" + std::to_string(token) + "\",\"deadline_in_ms\":" + std::to_string(remaining));
}

// The C library's message for the calling thread's failed call (R15).
std::string cerr_(long long id, tk_status s, int code) { return err(id, s, code, tk_errmsg()); }

std::vector<std::string> keys_of(const J &cmd) {
    std::vector<std::string> k;
    if (const J *a = cmd.get("keys"); a && a->t == J::ARR)
        for (auto &x : a->a) k.push_back(x.s);
    return k;
}

bool token_of(const J &cmd, uint64_t &tok) {
    const J *t = cmd.get("token");
    if (!t || t->t != J::STR || t->s.empty()) return false;
    char *end = nullptr;
    errno = 0;
    unsigned long long v = strtoull(t->s.c_str(), &end, 10);
    if (errno || !end || *end) return false;
    tok = v;
    return true;
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
    const J *lab = cmd.get("label");
    bool has_label = lab && lab->t == J::STR;
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
        if (has_label) o.label = lab->s;
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
        tk_tls_config t = TK_TLS_CONFIG_INIT;
        t.ca_file = ca.empty() ? nullptr : ca.c_str();
        t.cert_file = cert.empty() ? nullptr : cert.c_str();
        t.key_file = key.empty() ? nullptr : key.c_str();
        t.server_name = sn.empty() ? nullptr : sn.c_str();
        tk_config cfg = TK_CONFIG_INIT;
        cfg.addrs = a.data();
        cfg.n_addrs = a.size();
        cfg.token = token.c_str();
        cfg.tls = has_tls ? &t : nullptr;
        cfg.connect_timeout_ms = cto > 0 ? (uint32_t)cto : 0;
        cfg.answer_allowance_ms = allowance > 0 ? (uint32_t)allowance : 0; // edge rule R2
        cfg.label = has_label ? lab->s.c_str() : nullptr;                  // protocol 1.1 label (§12.3)
        conn->c = tk_client_new(&cfg);
        if (!conn->c) return err(id, has_tls ? TK_E_TLS : TK_E_INVALID, 0, tk_client_new_error());
        tk_status s = tk_client_wait_connected(conn->c, 0);
        if (s != TK_OK) {
            uint8_t code = 0;
            tk_client_last_error(conn->c, &code);
            return cerr_(id, s, code);
        }
        if (use_queue) conn->ql = std::make_unique<QueueLoop>(conn->c);
    }
    std::lock_guard<std::mutex> g(mu);
    cur = conn;
    return ok(id);
}

// One acquire (or key set, when keys is not empty) through the API of the
// mode, cancellable by `cancel` with id; fills the C lease, or the C++ one.
struct Got {
    tk_status s = TK_OK;
    int code = 0;
    std::string msg;
    tk_lease l{};
    std::optional<ticketing::Lease> cpp;
};

Got acquire_any(const std::shared_ptr<Conn> &cn, long long id, const std::string &key, const std::vector<std::string> &keys,
                uint32_t lease, uint32_t wait, uint32_t min_rem) {
    Got g;
    if (use_cpp) {
        try {
            ticketing::AcquireOptions ao;
            ao.min_remaining = std::chrono::milliseconds(min_rem);
            // registered before a cancel can look for it: a cancel sent as soon as
            // the request reached the server waits for mu
            std::unique_lock<std::mutex> lk(mu);
            auto pa = keys.empty() ? cn->cpp->start_acquire(key, std::chrono::milliseconds(lease), std::chrono::milliseconds(wait), ao)
                                   : cn->cpp->start_acquire_set(keys, std::chrono::milliseconds(lease), std::chrono::milliseconds(wait));
            pending_cpp[id] = &pa;
            lk.unlock();
            try {
                g.cpp.emplace(pa.wait());
                g.l = g.cpp->native();
            } catch (const ticketing::Error &e) {
                g.s = e.status();
                g.code = e.code();
                g.msg = e.what();
            }
            lk.lock();
            pending_cpp.erase(id);
        } catch (const ticketing::Error &e) {
            g.s = e.status();
            g.code = e.code();
            g.msg = e.what();
        }
        return g;
    }
    if (cn->ql) {
        auto r = std::make_shared<QueueLoop::Req>();
        r->kind = TK_EV_ACQUIRE;
        r->id = id;
        r->key = key;
        r->keys = keys;
        r->lease = lease;
        r->wait = wait;
        r->min_remaining = min_rem;
        tk_event ev = cn->ql->post(r);
        g.s = ev.status;
        g.code = ev.lease.code;
        g.msg = ev.lease.message;
        g.l = ev.lease;
        return g;
    }
    tk_op *op = nullptr;
    tk_acquire_opts o{sizeof(tk_acquire_opts), min_rem};
    std::vector<tk_key> ks;
    for (auto &k : keys) ks.push_back(tk_key{k.data(), k.size()});
    {
        std::lock_guard<std::mutex> lk(mu); // registered before a cancel can look for it
        g.s = keys.empty() ? tk_acquire_start_ex(cn->c, key.data(), key.size(), lease, wait, &o, &op)
                           : tk_acquire_set_start(cn->c, ks.data(), ks.size(), lease, wait, &op);
        if (g.s != TK_OK) {
            g.msg = tk_errmsg();
            return g;
        }
        pending_c[id] = op;
    }
    g.s = tk_op_wait(op, &g.l);
    if (g.s != TK_OK) {
        g.code = g.l.code;
        g.msg = tk_errmsg();
    }
    {
        std::lock_guard<std::mutex> lk(mu);
        pending_c.erase(id);
    }
    tk_op_free(op);
    return g;
}

std::string do_acquire(std::shared_ptr<Conn> cn, const J &cmd, long long id, const std::string &key, bool set, bool try_) {
    long long lease = num(cmd, "lease_ms"), wait = num(cmd, "wait_ms"), minr = num(cmd, "min_remaining_ms", 0);
    if (!use_cpp && !range_ok(lease)) return bad_ms(id, "lease", lease, 1);
    if (!use_cpp && !range_ok(wait)) return bad_ms(id, "wait", wait, 0);
    if (!range_ok(minr)) return bad_ms(id, "min_remaining", minr, 0);
    if (use_cpp && (!range_ok(lease) || !range_ok(wait))) { // the wrapper's own check of std::chrono::milliseconds
        try {
            ticketing::detail::to_ms(std::chrono::milliseconds(lease), "lease");
            ticketing::detail::to_ms(std::chrono::milliseconds(wait), "wait");
        } catch (const ticketing::Error &e) {
            return err(id, e.status(), e.code(), e.what());
        }
    }
    std::vector<std::string> keys;
    if (set) keys = keys_of(cmd);
    if (set && keys.empty()) return err(id, TK_E_INVALID, 0, "acquire_set: keys must be 2..16 keys (got 0)");
    Got g = acquire_any(cn, id, key, keys, (uint32_t)lease, (uint32_t)wait, (uint32_t)minr);
    if (try_ && g.s == TK_TIMEOUT) return ok(id, ",\"acquired\":false"); // R13: not acquired is a value
    if (g.s != TK_OK) return err(id, g.s, g.code, g.msg);
    uint64_t tok = g.l.token;
    int64_t rem = tk_lease_remaining_ms(&g.l);
    if (g.cpp) keep(std::move(*g.cpp)); // the lease object stays alive for release_lease / lease_ending
    else keep(g.l);
    if (try_) return ok(id, ",\"acquired\":true,\"token\":\"" + std::to_string(tok) + "\",\"deadline_in_ms\":" + std::to_string(rem));
    return grant(id, tok, rem);
}

std::string do_release(std::shared_ptr<Conn> cn, const J &cmd, long long id, const std::string &key, bool set) {
    uint64_t tok = 0;
    if (!token_of(cmd, tok)) return err(id, TK_E_INVALID, 0, "release: token must be a decimal 1..18446744073709551615");
    std::vector<std::string> keys;
    if (set) keys = keys_of(cmd);
    if (use_cpp) {
        try {
            if (set) cn->cpp->release_set(keys, tok);
            else cn->cpp->release(key, tok);
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
        r->keys = keys;
        r->token = tok;
        tk_event ev = cn->ql->post(r);
        if (ev.status != TK_OK) return err(id, ev.status, ev.lease.code, ev.lease.message);
        return ok(id);
    }
    uint8_t code = 0;
    tk_status s;
    if (set) {
        std::vector<tk_key> ks;
        for (auto &k : keys) ks.push_back(tk_key{k.data(), k.size()});
        s = tk_release_set(cn->c, ks.data(), ks.size(), tok, &code);
    } else {
        s = tk_release_token(cn->c, key.data(), key.size(), tok, &code);
    }
    if (s != TK_OK) return cerr_(id, s, code);
    return ok(id);
}

// R6: the lease object's own release; a second one is a no-op that says so.
std::string do_release_lease(std::shared_ptr<Conn> cn, const J &cmd, long long id) {
    uint64_t tok = 0;
    if (!token_of(cmd, tok)) return err(id, TK_E_INVALID, 0, "release_lease: token must be a decimal 1..18446744073709551615");
    auto lo = lease_of(tok);
    if (!lo) return err(id, TK_E_INVALID, 0, "release_lease: no lease object with that token in this driver");
    if (lo->cpp) {
        bool already = lo->cpp->released();
        try {
            lo->cpp->release();
        } catch (const ticketing::Error &e) {
            return err(id, e.status(), e.code(), e.what());
        }
        return ok(id, std::string(",\"already\":") + (already ? "true" : "false"));
    }
    int already = 0;
    tk_status s = tk_release_lease(cn->raw(), &lo->c, &already);
    if (s != TK_OK) return cerr_(id, s, 0);
    return ok(id, std::string(",\"already\":") + (already ? "true" : "false"));
}

// R12: answers when the lease's end signal fires (margin before its end).
std::string do_lease_ending(const J &cmd, long long id) {
    uint64_t tok = 0;
    if (!token_of(cmd, tok)) return err(id, TK_E_INVALID, 0, "lease_ending: token must be a decimal");
    long long margin = num(cmd, "margin_ms", 0);
    if (!range_ok(margin)) return bad_ms(id, "margin", margin, 0);
    auto lo = lease_of(tok);
    if (!lo) return err(id, TK_E_INVALID, 0, "lease_ending: no lease object with that token in this driver");
    if (lo->cpp) {
        std::this_thread::sleep_until(lo->cpp->ending(std::chrono::milliseconds(margin)));
        return ok(id, ",\"remaining_ms\":" + std::to_string(lo->cpp->remaining().count()));
    }
    int fd = tk_lease_ending_fd(&lo->c, (uint32_t)margin);
    if (fd < 0) return err(id, TK_E_INTERNAL, 0, std::string("tk_lease_ending_fd: ") + strerror(errno));
    struct pollfd p = {fd, POLLIN, 0};
    int64_t bound = tk_lease_remaining_ms(&lo->c) + 1000;
    poll(&p, 1, bound > 0 ? (int)bound : 0);
    close(fd);
    return ok(id, ",\"remaining_ms\":" + std::to_string(tk_lease_remaining_ms(&lo->c)));
}

struct ScopeFailed {};

std::string do_with_lock(std::shared_ptr<Conn> cn, const J &cmd, long long id, const std::string &key) {
    long long lease = num(cmd, "lease_ms"), wait = num(cmd, "wait_ms"), hold_ms = num(cmd, "hold_ms");
    const J *f = cmd.get("fail");
    bool fail = f && f->t == J::BOOL && f->b;
    if (!range_ok(lease)) return bad_ms(id, "lease", lease, 1);
    if (!range_ok(wait)) return bad_ms(id, "wait", wait, 0);
    Scope scope; // counted: at program exit the driver waits for it to end
    if (use_cpp) {
        uint64_t tok = 0;
        try {
            // RAII scope: the Lease's destructor releases on normal and failing exit.
            std::unique_lock<std::mutex> lk(mu); // registered before a cancel can look for it
            auto pa = cn->cpp->start_acquire(key, std::chrono::milliseconds(lease), std::chrono::milliseconds(wait));
            pending_cpp[id] = &pa; // cancellable while queued (R11)
            lk.unlock();
            struct Unreg {
                long long id;
                ~Unreg() {
                    std::lock_guard<std::mutex> g(mu);
                    pending_cpp.erase(id);
                }
            } unreg{id};
            ticketing::Lease l = pa.wait();
            tok = l.token();
            hold(hold_ms);
            if (fail) throw ScopeFailed{};
        } catch (const ScopeFailed &) {
        } catch (const ticketing::Error &e) {
            return err(id, e.status(), e.code(), e.what());
        }
        return ok(id, ",\"token\":\"" + std::to_string(tok) + "\"");
    }
    Got g = acquire_any(cn, id, key, {}, (uint32_t)lease, (uint32_t)wait, 0);
    if (g.s != TK_OK) return err(id, g.s, g.code, g.msg);
    hold(hold_ms);
    (void)fail; // C has no exceptions: the failing path takes the same cleanup
    if (cn->ql) { // the release through the queue as well
        auto r = std::make_shared<QueueLoop::Req>();
        r->kind = TK_EV_RELEASE;
        r->id = -id - 1000000;
        r->key = key;
        r->token = g.l.token;
        tk_event rev = cn->ql->post(r);
        if (rev.status != TK_OK) fprintf(stderr, "driver: with_lock release: %s\n", rev.lease.message);
    } else {
        tk_status s = tk_release(cn->c, &g.l);
        if (s != TK_OK) fprintf(stderr, "driver: with_lock release: %s\n", tk_errmsg());
    }
    return ok(id, ",\"token\":\"" + std::to_string(g.l.token) + "\"");
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
    if (name == "lease_ending") return do_lease_ending(cmd, id);
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
    if (name == "release_lease") return do_release_lease(cn, cmd, id);
    if (name == "acquire_set") return do_acquire(cn, cmd, id, "", true, false);
    if (name == "release_set") return do_release(cn, cmd, id, "", true);
    std::string key;
    if (!key_of(cmd, key)) return err(id, TK_E_INVALID, 0, "bad key_hex");
    if (name == "acquire") return do_acquire(cn, cmd, id, key, false, false);
    if (name == "try_acquire") return do_acquire(cn, cmd, id, key, false, true);
    if (name == "release") return do_release(cn, cmd, id, key, false);
    if (name == "with_lock") return do_with_lock(cn, cmd, id, key);
    return "{\"id\":" + std::to_string(id) + ",\"ok\":false,\"error\":\"unsupported\",\"message\":\"unknown cmd " + name + "\"}";
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
    // R10: the program exits: open scopes end now (their locks are released),
    // then the client closes and pending commands answer closed.
    {
        std::unique_lock<std::mutex> g(xmu);
        exiting = true;
        xcv.notify_all();
        xcv.wait_for(g, std::chrono::seconds(6), [] { return scopes == 0; });
    }
    std::shared_ptr<Conn> cn;
    {
        std::lock_guard<std::mutex> g(mu);
        cn = cur;
        for (auto &kv : leases) // the runner owns these locks: leave them held
            if (kv.second->cpp) kv.second->cpp->detach();
    }
    if (cn) tk_client_close(cn->raw());
    std::unique_lock<std::mutex> g(dmu);
    dcv.wait_for(g, std::chrono::seconds(5), [&] { return running.load() == 0; });
    return 0;
}
