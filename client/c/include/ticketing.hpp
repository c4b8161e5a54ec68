// ticketing.hpp: C++17 RAII wrapper over libticketing (ticketing.h).
//
// Errors are exceptions (ticketing::Error and one subclass per tk_status);
// what() says where (edge rule R15): the operation, the key and the server,
// e.g. `acquire "orders/42" at 127.0.0.1:7470: busy (QUEUE_FULL), not queued`.
// A try that finds the key held returns std::nullopt (try_acquire, R13).
//
// ticketing::Client is movable and thread-safe (it shares one tk_client).
// ticketing::Lease is move-only; its destructor releases the lock (noexcept:
// a failed release goes to Options::on_release_error, never an exception).
// Ownership lives in the lease's token, not in a thread: a Lease may be moved
// to and released from any thread.
#ifndef TICKETING_HPP
#define TICKETING_HPP

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unistd.h>

#include "ticketing.h"

namespace ticketing {

class Error : public std::runtime_error {
public:
    Error(tk_status st, int code, const std::string &msg) : std::runtime_error(msg), status_(st), code_(code) {}
    tk_status status() const noexcept { return status_; }
    int code() const noexcept { return code_; } // protocol §4 code, 0 when none
private:
    tk_status status_;
    int code_;
};
#define TICKETING_ERR_(Name)                                                                    \
    class Name : public Error {                                                                 \
    public:                                                                                     \
        using Error::Error;                                                                     \
    };
TICKETING_ERR_(TimeoutError)
TICKETING_ERR_(BusyError)
TICKETING_ERR_(IndeterminateError)
TICKETING_ERR_(NotHolderError)
TICKETING_ERR_(AuthError)
TICKETING_ERR_(TlsError)
TICKETING_ERR_(ConnectError)
TICKETING_ERR_(InvalidArgument)
TICKETING_ERR_(ProtocolError)
TICKETING_ERR_(CancelledError)
TICKETING_ERR_(ClosedError)
TICKETING_ERR_(NoLeaderError)
TICKETING_ERR_(InsufficientLeaseError) // R14: granted with less than min_remaining left (released)
TICKETING_ERR_(UnsupportedError)       // the server does not speak the 1.1 feature (key sets)
#undef TICKETING_ERR_

[[noreturn]] inline void throw_status(tk_status st, int code = 0, const char *msg = nullptr) {
    std::string m = msg && *msg ? std::string(msg) : std::string(tk_strerror(st));
    switch (st) {
    case TK_TIMEOUT: throw TimeoutError(st, code, m);
    case TK_BUSY: throw BusyError(st, code, m);
    case TK_INDETERMINATE: throw IndeterminateError(st, code, m);
    case TK_NOT_HOLDER: throw NotHolderError(st, code, m);
    case TK_E_AUTH: throw AuthError(st, code, m);
    case TK_E_TLS: throw TlsError(st, code, m);
    case TK_E_CONNECT: throw ConnectError(st, code, m);
    case TK_E_INVALID: throw InvalidArgument(st, code, m);
    case TK_E_PROTOCOL: throw ProtocolError(st, code, m);
    case TK_E_CANCELLED: throw CancelledError(st, code, m);
    case TK_E_CLOSED: throw ClosedError(st, code, m);
    case TK_E_NO_LEADER: throw NoLeaderError(st, code, m);
    case TK_INSUFFICIENT_LEASE: throw InsufficientLeaseError(st, code, m);
    case TK_E_UNSUPPORTED: throw UnsupportedError(st, code, m);
    default: throw Error(st, code, m);
    }
}

struct TlsOptions {
    std::string ca_file, cert_file, key_file, server_name;
};

struct Options {
    std::vector<std::string> addrs;
    std::string token;
    std::optional<TlsOptions> tls;
    std::chrono::milliseconds connect_timeout{5000};
    // Edge rule R2: a written acquire unanswered this long past its wait ends
    // IndeterminateError (withdrawn with C). 0 = the library default, 3 s.
    std::chrono::milliseconds answer_allowance{0};
    bool wait_connected = true; // the constructor waits for a first connection (throws ConnectError/AuthError/TlsError)
    // Protocol 1.1 connection label (§12.3): unset = "<host>/<pid> cpp/<version>"
    // ("<app_name> <host>/<pid> cpp/<version>" with app_name); "" = none.
    std::optional<std::string> label;
    std::string app_name;
    std::function<void(const Error &)> on_release_error; // failures of Lease's destructor
};

namespace detail {
struct State {
    tk_client *c = nullptr;
    std::function<void(const Error &)> on_release_error;
    ~State() { tk_client_free(c); }
};
inline std::uint32_t to_ms(std::chrono::milliseconds d, const char *what) {
    if (d.count() < 0 || static_cast<unsigned long long>(d.count()) > 0xffffffffull)
        throw InvalidArgument(TK_E_INVALID, 0,
                              std::string(what) + " must be 0..4294967295 ms (got " + std::to_string(d.count()) + ")");
    return static_cast<std::uint32_t>(d.count());
}
// The C library's message of this thread's failed call (R15), else the status's text.
[[noreturn]] inline void fail(tk_status s, int code = 0) { throw_status(s, code, tk_errmsg()); }
inline std::vector<tk_key> keys_of(const std::vector<std::string> &keys) {
    std::vector<tk_key> k;
    for (auto &x : keys) k.push_back(tk_key{x.data(), x.size()});
    return k;
}
inline std::string default_label(const std::string &app) {
    char host[256] = {0};
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) std::snprintf(host, sizeof host, "unknown");
    std::string l = std::string(host) + "/" + std::to_string(static_cast<long>(getpid())) + " cpp/" + TK_VERSION;
    return app.empty() ? l : app + " " + l;
}
} // namespace detail

// Options of one acquire.
struct AcquireOptions {
    // R14: fail InsufficientLeaseError (the client releases the grant) when less
    // than this is left of the lease after the grant; 0 = no minimum.
    std::chrono::milliseconds min_remaining{0};
};

namespace detail {
inline tk_acquire_opts c_opts(const AcquireOptions &o) {
    tk_acquire_opts c{sizeof(tk_acquire_opts), to_ms(o.min_remaining, "min_remaining")};
    return c;
}
} // namespace detail

class PendingAcquire;
class Client;

class Lease {
public:
    Lease() = default;
    Lease(const Lease &) = delete;
    Lease &operator=(const Lease &) = delete;
    Lease(Lease &&o) noexcept
        : st_(std::move(o.st_)), l_(o.l_), keys_(std::move(o.keys_)), held_(std::exchange(o.held_, false)),
          released_(o.released_) {}
    Lease &operator=(Lease &&o) noexcept {
        if (this != &o) {
            release_noexcept();
            st_ = std::move(o.st_);
            l_ = o.l_;
            keys_ = std::move(o.keys_);
            held_ = std::exchange(o.held_, false);
            released_ = o.released_;
        }
        return *this;
    }
    // The destructor releases a held lease and BLOCKS until the server
    // answers (O or N), retrying for at most the 5 s release window when it
    // does not; it never throws (a failure goes to Options::on_release_error).
    // detach() first to leave without waiting (the lease then ends the lock).
    ~Lease() { release_noexcept(); }

    std::uint64_t token() const noexcept { return l_.token; }
    std::string_view key() const noexcept { return {reinterpret_cast<const char *>(l_.key), l_.key_len}; }
    std::chrono::steady_clock::time_point deadline() const noexcept {
        return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(l_.deadline_ns));
    }
    std::chrono::milliseconds remaining() const noexcept {
        return std::chrono::milliseconds(tk_lease_remaining_ms(&l_));
    }
    bool held() const noexcept { return held_; }
    // Whether this object released its lock (the server answered); a second
    // release() is then a no-op (edge rule R6).
    bool released() const noexcept { return released_; }
    explicit operator bool() const noexcept { return held_; }
    // A key set's keys (Client::acquire_set), in the order acquired; empty for one key.
    const std::vector<std::string> &keys() const noexcept { return keys_; }
    // R12: when to stop working: margin before the lease's conservative local
    // deadline; now once released or detached. Use it with wait_until of a
    // condition variable or future, or sleep_until.
    std::chrono::steady_clock::time_point ending(std::chrono::milliseconds margin) const noexcept {
        auto now = std::chrono::steady_clock::now();
        if (!held_) return now;
        auto at = deadline() - margin;
        return at < now ? now : at;
    }
    const tk_lease &native() const noexcept { return l_; }
    // Gives up the duty to release: the lock stays held until someone
    // releases its token or the lease ends.
    tk_lease detach() noexcept {
        held_ = false;
        return l_;
    }

    // Releases; throws on failure. The lease stays held (and its destructor
    // tries again) unless the server confirmed with O or said it is not the
    // holder.
    // A released lease: a no-op (R6). A closed client throws ClosedError and
    // sends nothing (the lock stays held until its lease ends, R7).
    void release() {
        if (!held_) return;
        std::uint8_t code = 0;
        tk_status s;
        if (keys_.empty()) {
            s = tk_release_token(st_->c, l_.key, l_.key_len, l_.token, &code);
        } else {
            auto k = detail::keys_of(keys_);
            s = tk_release_set(st_->c, k.data(), k.size(), l_.token, &code);
        }
        if (s == TK_OK || s == TK_NOT_HOLDER || s == TK_E_INVALID) {
            held_ = false;
            released_ = s != TK_E_INVALID;
        }
        if (s != TK_OK) detail::fail(s, code);
    }

private:
    friend class Client;
    friend class PendingAcquire;
    Lease(std::shared_ptr<detail::State> st, const tk_lease &l, std::vector<std::string> keys = {})
        : st_(std::move(st)), l_(l), keys_(std::move(keys)), held_(true) {}
    void release_noexcept() noexcept {
        if (!held_) return;
        try {
            release();
        } catch (const Error &e) {
            held_ = false;
            if (st_ && st_->on_release_error) {
                try {
                    st_->on_release_error(e);
                } catch (...) {
                }
            }
        } catch (...) {
            held_ = false;
        }
    }
    std::shared_ptr<detail::State> st_;
    tk_lease l_{};
    std::vector<std::string> keys_;
    bool held_ = false;
    bool released_ = false;
};

// An acquire in progress: wait() for it from one thread, cancel() from any
// other; or poll fd() / timeout() from an event loop and drive().
class PendingAcquire {
public:
    PendingAcquire(const PendingAcquire &) = delete;
    PendingAcquire &operator=(const PendingAcquire &) = delete;
    PendingAcquire(PendingAcquire &&o) noexcept
        : st_(std::move(o.st_)), op_(std::exchange(o.op_, nullptr)), keys_(std::move(o.keys_)) {}
    ~PendingAcquire() { tk_op_free(op_); }

    void cancel() noexcept { tk_op_cancel(op_); }
    int fd() const noexcept { return tk_op_fd(op_); }
    std::optional<std::chrono::milliseconds> timeout() const noexcept {
        int t = tk_op_timeout_ms(op_);
        if (t < 0) return std::nullopt;
        return std::chrono::milliseconds(t);
    }
    // nullopt while pending; the lease, or throws.
    std::optional<Lease> drive() {
        tk_lease l{};
        tk_status s = tk_op_drive(op_, &l);
        if (s == TK_PENDING) return std::nullopt;
        return finish(s, l);
    }
    Lease wait() {
        tk_lease l{};
        return finish(tk_op_wait(op_, &l), l);
    }

private:
    friend class Client;
    PendingAcquire(std::shared_ptr<detail::State> st, tk_op *op, std::vector<std::string> keys = {})
        : st_(std::move(st)), op_(op), keys_(std::move(keys)) {}
    Lease finish(tk_status s, const tk_lease &l) {
        if (s != TK_OK) detail::fail(s, l.code);
        return Lease(st_, l, keys_);
    }
    std::shared_ptr<detail::State> st_;
    tk_op *op_;
    std::vector<std::string> keys_; // a key set's
};

class Client {
public:
    explicit Client(const Options &o) : st_(std::make_shared<detail::State>()) {
        std::vector<const char *> a;
        for (auto &s : o.addrs) a.push_back(s.c_str());
        tk_tls_config t{};
        if (o.tls) {
            t.ca_file = o.tls->ca_file.empty() ? nullptr : o.tls->ca_file.c_str();
            t.cert_file = o.tls->cert_file.empty() ? nullptr : o.tls->cert_file.c_str();
            t.key_file = o.tls->key_file.empty() ? nullptr : o.tls->key_file.c_str();
            t.server_name = o.tls->server_name.empty() ? nullptr : o.tls->server_name.c_str();
        }
        tk_config cfg{};
        cfg.addrs = a.data();
        cfg.n_addrs = a.size();
        cfg.token = o.token.c_str();
        cfg.tls = o.tls ? &t : nullptr;
        cfg.connect_timeout_ms = detail::to_ms(o.connect_timeout, "connect_timeout");
        cfg.answer_allowance_ms = detail::to_ms(o.answer_allowance, "answer_allowance");
        std::string label = o.label ? *o.label : detail::default_label(o.app_name);
        cfg.label = label.c_str();
        st_->c = tk_client_new(&cfg);
        if (!st_->c) throw InvalidArgument(TK_E_INVALID, 0, tk_client_new_error());
        st_->on_release_error = o.on_release_error;
        if (o.wait_connected) {
            tk_status s = tk_client_wait_connected(st_->c, 0);
            if (s != TK_OK) {
                std::uint8_t code = 0;
                tk_client_last_error(st_->c, &code);
                detail::fail(s, code);
            }
        }
    }
    Client(Client &&) noexcept = default;
    Client &operator=(Client &&) noexcept = default;
    Client(const Client &) = delete;
    Client &operator=(const Client &) = delete;

    Lease acquire(std::string_view key, std::chrono::milliseconds lease, std::chrono::milliseconds wait,
                  const AcquireOptions &opts = {}) {
        tk_lease l{};
        tk_acquire_opts co = detail::c_opts(opts);
        tk_status s = tk_acquire_ex(c(), key.data(), key.size(), detail::to_ms(lease, "lease"),
                                    detail::to_ms(wait, "wait"), &co, &l);
        if (s != TK_OK) detail::fail(s, l.code);
        return Lease(st_, l);
    }
    // nullopt when not acquired within wait (default: try once); other failures throw (R13).
    std::optional<Lease> try_acquire(std::string_view key, std::chrono::milliseconds lease,
                                     std::chrono::milliseconds wait = std::chrono::milliseconds(0),
                                     const AcquireOptions &opts = {}) {
        try {
            return acquire(key, lease, wait, opts);
        } catch (const TimeoutError &) {
            return std::nullopt;
        }
    }
    PendingAcquire start_acquire(std::string_view key, std::chrono::milliseconds lease, std::chrono::milliseconds wait,
                                 const AcquireOptions &opts = {}) {
        tk_op *op = nullptr;
        tk_acquire_opts co = detail::c_opts(opts);
        tk_status s = tk_acquire_start_ex(c(), key.data(), key.size(), detail::to_ms(lease, "lease"),
                                          detail::to_ms(wait, "wait"), &co, &op);
        if (s != TK_OK) detail::fail(s);
        return PendingAcquire(st_, op);
    }
    // Protocol 1.1 key set (§12.2): 2..16 distinct keys at once, one token; the
    // Lease releases the whole set. UnsupportedError from a 1.0 server.
    Lease acquire_set(const std::vector<std::string> &keys, std::chrono::milliseconds lease,
                      std::chrono::milliseconds wait) {
        return start_acquire_set(keys, lease, wait).wait();
    }
    PendingAcquire start_acquire_set(const std::vector<std::string> &keys, std::chrono::milliseconds lease,
                                     std::chrono::milliseconds wait) {
        tk_op *op = nullptr;
        auto k = detail::keys_of(keys);
        tk_status s = tk_acquire_set_start(c(), k.data(), k.size(), detail::to_ms(lease, "lease"),
                                           detail::to_ms(wait, "wait"), &op);
        if (s != TK_OK) detail::fail(s);
        return PendingAcquire(st_, op, keys);
    }
    // Releases a lock known by its token (from any process); throws on failure.
    void release(std::string_view key, std::uint64_t token) {
        std::uint8_t code = 0;
        tk_status s = tk_release_token(c(), key.data(), key.size(), token, &code);
        if (s != TK_OK) detail::fail(s, code);
    }
    // Releases a key set known by its token (keys in any order).
    void release_set(const std::vector<std::string> &keys, std::uint64_t token) {
        std::uint8_t code = 0;
        auto k = detail::keys_of(keys);
        tk_status s = tk_release_set(c(), k.data(), k.size(), token, &code);
        if (s != TK_OK) detail::fail(s, code);
    }
    void close() noexcept {
        if (st_) tk_client_close(st_->c);
    }
    tk_client *native() const noexcept { return st_ ? st_->c : nullptr; }

private:
    friend class Queue;
    // A moved-from Client has no state: every call throws ClosedError.
    tk_client *c() const {
        if (!st_) throw ClosedError(TK_E_CLOSED, 0, "ticketing::Client used after it was moved from");
        return st_->c;
    }
    std::shared_ptr<detail::State> st_;
};

// The completion queue (tk_queue_*, see ticketing.h) for an event loop: any
// number of acquires and releases from one thread, one fd to poll, their
// outcomes back as tk_events. Same rules as the C API; RAII: the destructor
// is tk_queue_free (withdraws unfinished acquires, releases grants whose
// events were not returned). Keeps its Client's connections alive. A queue
// belongs to one thread at a time.
//
//   ticketing::Queue q(client);
//   q.acquire("orders/42", 30s, 5s, ctx);
//   std::vector<tk_event> evs;
//   for (;;) { struct pollfd p{q.fd(), POLLIN, 0}; ::poll(&p, 1, q.timeout_ms()); q.poll(evs); ... }
class Queue {
public:
    explicit Queue(Client &c) : st_(c.st_) {
        c.c(); // a moved-from Client throws
        q_ = tk_queue_new(st_->c);
        if (!q_) throw Error(TK_E_NOMEM, 0, "tk_queue_new failed");
    }
    Queue(const Queue &) = delete;
    Queue &operator=(const Queue &) = delete;
    Queue(Queue &&o) noexcept : st_(std::move(o.st_)), q_(std::exchange(o.q_, nullptr)) {}
    Queue &operator=(Queue &&o) noexcept {
        if (this != &o) {
            if (q_) tk_queue_free(q_);
            st_ = std::move(o.st_);
            q_ = std::exchange(o.q_, nullptr);
        }
        return *this;
    }
    ~Queue() {
        if (q_) tk_queue_free(q_);
    }

    int fd() const noexcept { return tk_queue_fd(q_); }
    // Poll again after this many ms even if fd() stays quiet (-1: only on fd).
    int timeout_ms() const noexcept { return tk_queue_timeout_ms(q_); }
    // Starts an acquire; its event carries `user`. The returned handle is for
    // cancel() until its event is returned. Throws on an immediate failure
    // (bad argument, closed, forked), which produces no event.
    tk_op *acquire(std::string_view key, std::chrono::milliseconds lease, std::chrono::milliseconds wait,
                   void *user = nullptr) {
        tk_op *op = nullptr;
        tk_status s = tk_queue_acquire(live(), key.data(), key.size(), detail::to_ms(lease, "lease"),
                                       detail::to_ms(wait, "wait"), user, &op);
        if (s != TK_OK) detail::fail(s);
        return op;
    }
    void release(const tk_lease &l, void *user = nullptr) {
        tk_status s = tk_queue_release(live(), &l, user);
        if (s != TK_OK) detail::fail(s);
    }
    void release(std::string_view key, std::uint64_t token, void *user = nullptr) {
        tk_status s = tk_queue_release_token(live(), key.data(), key.size(), token, user);
        if (s != TK_OK) detail::fail(s);
    }
    void cancel(tk_op *op) noexcept {
        if (q_) tk_queue_cancel(q_, op);
    }
    // Appends the finished ops' events to out (never blocks); returns how many.
    std::size_t poll(std::vector<tk_event> &out) {
        std::size_t total = 0;
        tk_event ev[64];
        for (;;) {
            std::size_t n = tk_queue_poll(live(), ev, 64);
            out.insert(out.end(), ev, ev + n);
            total += n;
            if (n < 64) return total;
        }
    }
    std::size_t pending() const noexcept { return q_ ? tk_queue_pending(q_) : 0; }
    tk_queue *native() const noexcept { return q_; }

private:
    tk_queue *live() const {
        if (!q_) throw ClosedError(TK_E_CLOSED, 0, "ticketing::Queue used after it was moved from");
        return q_;
    }
    std::shared_ptr<detail::State> st_;
    tk_queue *q_ = nullptr;
};

// A named lock in the standard Lockable shape, for std::lock_guard and
// std::unique_lock: lock() acquires (waiting up to `wait`, throwing as
// Client::acquire does), try_lock() tries once, unlock() releases (noexcept:
// as the Lease destructor, it blocks until the server confirms, at most the
// 5 s release window; a failure goes to Options::on_release_error). Not
// recursive; one holder at a time per object. The lease is lease().
//
//   ticketing::Mutex m(client, "orders/42", 30s, 5s);
//   { std::lock_guard<ticketing::Mutex> g(m); write_with(m.lease().token()); }
class Mutex {
public:
    Mutex(Client &c, std::string key, std::chrono::milliseconds lease, std::chrono::milliseconds wait)
        : c_(&c), key_(std::move(key)), lease_ms_(lease), wait_(wait) {}
    Mutex(const Mutex &) = delete;
    Mutex &operator=(const Mutex &) = delete;
    void lock() { l_ = c_->acquire(key_, lease_ms_, wait_); }
    bool try_lock() {
        auto l = c_->try_acquire(key_, lease_ms_);
        if (!l) return false;
        l_ = std::move(*l);
        return true;
    }
    void unlock() noexcept { l_ = Lease(); }
    // The current lease (held() false when unlocked).
    const Lease &lease() const noexcept { return l_; }

private:
    Client *c_;
    std::string key_;
    std::chrono::milliseconds lease_ms_, wait_;
    Lease l_;
};

} // namespace ticketing
#endif
