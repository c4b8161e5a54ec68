/* libticketing: the official C client of the Ticketing lock server (protocol 1.1:
 * docs/protocol.md; key sets, connection labels and the TLS hint of §12).
 *
 * Threading: a tk_client is safe to share between any number of threads.
 * Each connection has one background I/O thread (connect, handshake, TLS,
 * reads, reconnect with backoff 0.1 s doubling to 3.2 s, forever). Callers
 * append frames to a connection's write buffer under that connection's mutex
 * (held only to append or match, never across a system call); on plain TCP
 * the caller then writes every queued frame in one send() itself (TLS: the
 * I/O thread writes), and a burst of callers woken by one read writes its
 * next frames in one send(). The I/O thread reads many answers per read and
 * wakes only the callers whose answers arrived (a futex per blocking call,
 * no broadcast). Lock order inside the library: op mutex -> client mutex ->
 * connection mutex; completions are delivered after the connection mutex is
 * released, so a slow caller never stalls the I/O thread.
 *
 * Ownership of a lock lives in its token (tk_lease.token), never in a thread:
 * any thread, or another process that knows the token, may release it.
 *
 * Fork: a client used in a child process after fork() answers TK_E_FORKED
 * and never touches the inherited sockets; create a new client in the child.
 */
#ifndef TICKETING_H
#define TICKETING_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Everything the library exports is marked TK_API; every other symbol of the
 * shared library is hidden (-fvisibility=hidden). */
#if defined(__GNUC__)
#define TK_API __attribute__((visibility("default")))
#else
#define TK_API
#endif

/* The version of the header; tk_version() / tk_version_number() give the
 * library's at run time (they differ when an application built against one
 * header runs with another libticketing.so.0). */
#define TK_VERSION "0.2.0"
#define TK_VERSION_NUMBER 0x000200 /* 0xMMmmpp */
#define TK_MAX_KEY 250

typedef enum tk_status {
    TK_OK = 0,
    TK_TIMEOUT,       /* T: not acquired within the wait (or wait 0 on a held key) */
    TK_BUSY,          /* B: refused at once, not queued; the §4 code says why */
    TK_INDETERMINATE, /* sent, no definite answer (connection lost, U): do NOT enter */
    TK_NOT_HOLDER,    /* N on release: the key is free or held under another token */
    TK_E_AUTH,        /* REJECT AUTH_FAILED, or the server failed its mutual proof */
    TK_E_TLS,         /* TLS handshake or certificate verification failed */
    TK_E_CONNECT,     /* no connection within the connect budget */
    TK_E_INVALID,     /* bad argument (checked before sending) or E from the server */
    TK_E_PROTOCOL,    /* the peer broke the protocol */
    TK_E_CANCELLED,   /* tk_op_cancel */
    TK_E_CLOSED,      /* the client was closed */
    TK_E_NO_LEADER,   /* M answers exceeded the hop limit within the wait */
    TK_E_FORKED,      /* used in a child process after fork() */
    TK_E_NOMEM,
    TK_E_INTERNAL,
    TK_PENDING,       /* tk_op_drive: not finished yet */
    TK_INSUFFICIENT_LEASE, /* granted with less than min_remaining_ms left: released by the client (R14) */
    TK_E_UNSUPPORTED  /* the server does not announce the feature (a 1.0 server: key sets, labels) */
} tk_status;

/* Server codes (protocol §4), as found in tk_lease.code. */
enum {
    TK_CODE_NONE = 0,
    TK_CODE_QUEUE_FULL = 1,
    TK_CODE_OVERLOADED = 2,
    TK_CODE_CLOCK_UNHEALTHY = 3,
    TK_CODE_SHUTTING_DOWN = 4,
    TK_CODE_NO_QUORUM = 5,
    TK_CODE_BAD_HANDSHAKE = 10,
    TK_CODE_AUTH_FAILED = 11,
    TK_CODE_TLS_REQUIRED = 12, /* 1.1: REJECT from a TLS listener to a plaintext client (§12.4) */
    TK_CODE_BAD_OP = 20,
    TK_CODE_BAD_KEY = 21,
    TK_CODE_BAD_LEASE = 22,
    TK_CODE_BAD_WAIT = 23,
    TK_CODE_BAD_FLAGS = 24,
    TK_CODE_DUPLICATE_REQ_ID = 25,
    TK_CODE_BAD_ADMIN = 26,
    TK_CODE_NOT_PERMITTED = 27,
    TK_CODE_INTERNAL = 28,
    TK_CODE_BAD_KEYSET = 29, /* 1.1: E to S/X (§12.2) */
    TK_CODE_BAD_LABEL = 30   /* 1.1: E to L (§12.3) */
};

TK_API const char *tk_strerror(tk_status s);
/* Errors say where (edge rule R15): the message of the calling thread's most
 * recent call that failed (thread-local, valid until its next call), naming
 * the operation, the key and the server address, e.g.
 *   acquire "orders/42" at 127.0.0.1:7470: busy (QUEUE_FULL), not queued
 * and, for a refused argument (R8), the argument and its limit:
 *   acquire "": key must be 1..250 bytes (got 0)
 * "" when the thread's last failing call left none. Never contains a token. */
TK_API const char *tk_errmsg(void);
/* The library's version at run time ("0.1.0") and as 0xMMmmpp. */
TK_API const char *tk_version(void);
TK_API unsigned tk_version_number(void);

/* ABI growth: the input structs start with their size. Set it to
 * sizeof(struct) (TK_CONFIG_INIT / TK_TLS_CONFIG_INIT do), or leave it 0,
 * which means the layout of version 0.1 (the fields below as they are). A
 * later version appends fields and reads them only when size covers them. */
typedef struct tk_tls_config {
    uint32_t size;           /* sizeof(tk_tls_config), or 0 (the 0.1 layout) */
    const char *ca_file;     /* PEM roots; NULL = system default paths */
    const char *cert_file;   /* client certificate for mutual TLS, or NULL */
    const char *key_file;    /* its key, or NULL */
    const char *server_name; /* SNI + name to verify; NULL = the host of each address */
} tk_tls_config;

typedef struct tk_config {
    uint32_t size;            /* sizeof(tk_config), or 0 (the 0.1 layout) */
    const char *const *addrs; /* "host:port", one or more nodes of a cluster */
    size_t n_addrs;
    const char *token;          /* client token, NULL or "" = none */
    const tk_tls_config *tls;   /* NULL = plaintext TCP */
    uint32_t connect_timeout_ms; /* 0 = 5000: bounds each dial+handshake and the wait for a first connection */
    /* Optional log sink (never receives a token). level: 0 debug, 1 info, 2 warn, 3 error. */
    void (*log)(void *ud, int level, const char *msg);
    void *log_ud;
    /* Edge rule R2: an acquire written and unanswered this long past its wait
     * (counted from its write) ends TK_INDETERMINATE and is withdrawn with C.
     * 0 = 3000 ms. */
    uint32_t answer_allowance_ms;
    /* Protocol 1.1 connection label (§12.3), shown to operators in `locks`:
     * NULL = the default "<host>/<pid> c/<version>" ("<app_name> <host>/<pid>
     * c/<version>" with app_name); "" = no label. Cut to 64 bytes at a
     * character boundary; an invalid label (control characters) sends none. */
    const char *label;
    const char *app_name;
} tk_config;

#define TK_CONFIG_INIT {sizeof(tk_config), NULL, 0, NULL, NULL, 0, NULL, NULL, 0, NULL, NULL}
#define TK_TLS_CONFIG_INIT {sizeof(tk_tls_config), NULL, NULL, NULL, NULL}

typedef struct tk_lease {
    uint8_t key[TK_MAX_KEY];
    size_t key_len;
    uint64_t token;       /* fencing token: check it against the high-water mark in the same transaction as the write */
    uint64_t deadline_ns; /* CLOCK_MONOTONIC: send time + queued (from G) + lease; stop before it */
    uint8_t code;         /* on failure: the server's §4 code (TK_BUSY, TK_E_INVALID, TK_INDETERMINATE), else 0 */
    char message[128];    /* on failure: a human-readable reason (never a token); tk_errmsg() has it in full */
    uint8_t released;     /* set by tk_release_lease once the lease was released (R6) */
    uint8_t reserved[31]; /* for growth; zeroed by the library */
} tk_lease;

/* A key of a key set: data, len bytes. */
typedef struct tk_key {
    const void *data;
    size_t len;
} tk_key;

/* Options of an acquire (tk_acquire_ex, tk_acquire_start_ex, tk_queue_acquire_ex). */
typedef struct tk_acquire_opts {
    uint32_t size;             /* sizeof(tk_acquire_opts), or 0 (this layout) */
    uint32_t min_remaining_ms; /* R14: when the conservative remaining lease after the grant is below
                                * this, the client releases the grant and the call fails
                                * TK_INSUFFICIENT_LEASE; 0 = no minimum */
} tk_acquire_opts;

typedef struct tk_client tk_client;
typedef struct tk_op tk_op;

/* Creates a client and starts its connections in the background. Returns NULL
 * (errno EINVAL or ENOMEM) for an invalid configuration; tk_client_new_error()
 * then says why (e.g. the CA file that cannot be read). Never blocks. */
TK_API tk_client *tk_client_new(const tk_config *cfg);
/* Why the last tk_client_new of the calling thread returned NULL ("" if it did not). */
TK_API const char *tk_client_new_error(void);
/* Waits until a connection is up: TK_OK, TK_E_AUTH / TK_E_TLS (every address
 * failed so), TK_E_CONNECT after timeout_ms (0 = connect_timeout_ms). */
TK_API tk_status tk_client_wait_connected(tk_client *c, uint32_t timeout_ms);
/* The outcome of the most recent connection attempt (TK_OK when it connected)
 * and, for a REJECT, the server's §4 code (AUTH_FAILED, OVERLOADED, ...). */
TK_API tk_status tk_client_last_error(tk_client *c, uint8_t *code);
/* Closes every connection; pending calls answer TK_E_CLOSED. Idempotent. */
TK_API void tk_client_close(tk_client *c);
/* Closes and frees. Every tk_op must be freed before. */
TK_API void tk_client_free(tk_client *c);

/* Monotonic clock (ns) in the same base as tk_lease.deadline_ns. */
TK_API uint64_t tk_now_ns(void);
/* Milliseconds left until the lease's conservative local deadline (negative once passed). */
TK_API int64_t tk_lease_remaining_ms(const tk_lease *l);

/* Blocking acquire: waits up to wait_ms (0 = try once) for key, with a lease of
 * lease_ms (>= 1). Retried internally only while its bytes were never sent or
 * it was answered M, and only within the remaining wait. A written acquire
 * unanswered answer_allowance_ms (3 s) past its wait, counted from its write
 * (a silent server), ends TK_INDETERMINATE. While no connection is up and the
 * last attempt failed authentication or TLS, it fails at once with TK_E_AUTH /
 * TK_E_TLS, the reason in out->message. out must not be NULL (TK_E_INVALID):
 * the lease it receives is the only way to release the lock. */
TK_API tk_status tk_acquire(tk_client *c, const void *key, size_t key_len, uint32_t lease_ms,
                     uint32_t wait_ms, tk_lease *out);
/* As tk_acquire, with options (NULL = none): min_remaining_ms (R14). */
TK_API tk_status tk_acquire_ex(tk_client *c, const void *key, size_t key_len, uint32_t lease_ms, uint32_t wait_ms,
                               const tk_acquire_opts *opts, tk_lease *out);
/* Blocking release; TK_OK only when the server answered O. Retried for at most 5 s. */
TK_API tk_status tk_release(tk_client *c, const tk_lease *l);
TK_API tk_status tk_release_token(tk_client *c, const void *key, size_t key_len, uint64_t token,
                           uint8_t *code_out);
/* Releases the lease object once (edge rule R6): the first call releases as
 * tk_release and, when the server answered (O or N), marks l->released; a call
 * on a released lease is a no-op that returns TK_OK with *already = 1 (may be
 * NULL). A key set's lease (tk_acquire_set) is released by tk_release_set. */
TK_API tk_status tk_release_lease(tk_client *c, tk_lease *l, int *already);
/* The lease's end as a file descriptor (edge rule R12): a timerfd
 * (CLOCK_MONOTONIC) that becomes readable margin_ms before the lease's
 * conservative local deadline, at once when that has passed or the lease was
 * released (tk_release_lease). Poll it beside your work; close() it. -1 and
 * errno on failure. */
TK_API int tk_lease_ending_fd(const tk_lease *l, uint32_t margin_ms);

/* Protocol 1.1 key sets (§12.2): 2..16 distinct keys acquired at once, one
 * lease, one wait, one fencing token (out->token; out->key is the first key).
 * Fails TK_E_UNSUPPORTED, sending nothing, when the server does not announce
 * KEY_SETS. Released by tk_release_set with the same keys (any order). */
TK_API tk_status tk_acquire_set(tk_client *c, const tk_key *keys, size_t n, uint32_t lease_ms, uint32_t wait_ms,
                                tk_lease *out);
TK_API tk_status tk_release_set(tk_client *c, const tk_key *keys, size_t n, uint64_t token, uint8_t *code_out);
/* The cancellable form (tk_op_* below): tk_op_cancel withdraws the set from every queue. */
TK_API tk_status tk_acquire_set_start(tk_client *c, const tk_key *keys, size_t n, uint32_t lease_ms,
                                      uint32_t wait_ms, tk_op **op_out);

/* Non-blocking form for event loops.
 *   tk_acquire_start   starts an acquire (TK_OK), or fails at once (argument check).
 *   tk_op_fd           becomes readable when the op should be driven.
 *   tk_op_timeout_ms   drive again after this many ms even if the fd is quiet (-1: only on fd).
 *   tk_op_drive        TK_PENDING, or the final status (fills *out once).
 *   tk_op_cancel       withdraws the acquire (sends C when it is queued; a grant that
 *                      won the race is released by the client). Any thread. Then the op
 *                      finishes with TK_E_CANCELLED.
 *   tk_op_wait         blocks until the final status (may be called from another thread
 *                      than the canceller).
 *   tk_op_free         frees (cancelling first when unfinished). */
TK_API tk_status tk_acquire_start(tk_client *c, const void *key, size_t key_len, uint32_t lease_ms,
                           uint32_t wait_ms, tk_op **op_out);
TK_API tk_status tk_acquire_start_ex(tk_client *c, const void *key, size_t key_len, uint32_t lease_ms,
                                     uint32_t wait_ms, const tk_acquire_opts *opts, tk_op **op_out);
TK_API int tk_op_fd(tk_op *op);
TK_API int tk_op_timeout_ms(tk_op *op);
TK_API tk_status tk_op_drive(tk_op *op, tk_lease *out);
TK_API tk_status tk_op_wait(tk_op *op, tk_lease *out);
TK_API void tk_op_cancel(tk_op *op);
TK_API void tk_op_free(tk_op *op);

/* Completion queue: many concurrent ops driven from one event-loop thread,
 * with no thread per op and one wake-up per burst of answers (the form for
 * proxies and servers that run their own poll/epoll loop).
 *
 *   tk_queue_new            a queue over client c (NULL: errno ENOMEM, EMFILE or EINVAL).
 *   tk_queue_fd             an eventfd: readable while finished ops may be waiting
 *                           (POLLIN; level-triggered until tk_queue_poll drains it).
 *   tk_queue_timeout_ms     call tk_queue_poll again after this many ms even if the
 *                           fd stays quiet (retries while no connection is up, the
 *                           5 s release window); -1: only when the fd is readable;
 *                           0: at once.
 *   tk_queue_acquire        starts an acquire (same arguments and rules as tk_acquire);
 *                           TK_OK, or a failure at once (bad argument, closed, forked)
 *                           that produces no event. *op_out (may be NULL) is a handle
 *                           for tk_queue_cancel, valid until its event is returned.
 *   tk_queue_release(_token) starts a release (TK_OK only on O; retried for at most 5 s).
 *   tk_queue_cancel         withdraws an unfinished acquire: C is sent when it is queued
 *                           and a grant that won the race is released by the client;
 *                           its event says TK_E_CANCELLED. An acquire already finished
 *                           (its event not yet returned) keeps its outcome.
 *   tk_queue_poll           drives the queue and returns up to n finished ops in ev[]
 *                           (never blocks); call it when the fd is readable or the
 *                           timeout passed, until it returns fewer than n.
 *   tk_queue_pending        ops started and not yet returned by tk_queue_poll.
 *   tk_queue_free           withdraws unfinished acquires, releases grants whose events
 *                           were not yet returned, hands unconfirmed releases to the
 *                           client's background releaser, waits for answers already on
 *                           their way, and frees. Call before tk_client_free.
 *                           In a child after fork() a queue starts nothing (TK_E_FORKED),
 *                           polls nothing, and tk_queue_free only frees its memory.
 *
 * Threading: a queue belongs to one thread at a time (its event loop); the
 * client under it may be shared with other threads and queues. Requests
 * started on a queue are written by the connection's I/O thread, so a loop
 * that starts many ops in a row costs one send() for them all. */
typedef struct tk_queue tk_queue;

enum { TK_EV_ACQUIRE = 1, TK_EV_RELEASE = 2 };

typedef struct tk_event {
    void *user;       /* as given to tk_queue_acquire / tk_queue_release */
    tk_op *op;        /* the handle tk_queue_acquire gave (no longer valid; for matching only) */
    int kind;         /* TK_EV_ACQUIRE or TK_EV_RELEASE */
    tk_status status; /* as tk_acquire / tk_release would return */
    tk_lease lease;   /* acquire TK_OK: the lease. Otherwise key, token (release), code, message */
} tk_event;

TK_API tk_queue *tk_queue_new(tk_client *c);
TK_API int tk_queue_fd(tk_queue *q);
TK_API int tk_queue_timeout_ms(tk_queue *q);
TK_API tk_status tk_queue_acquire(tk_queue *q, const void *key, size_t key_len, uint32_t lease_ms,
                           uint32_t wait_ms, void *user, tk_op **op_out);
TK_API tk_status tk_queue_acquire_ex(tk_queue *q, const void *key, size_t key_len, uint32_t lease_ms,
                                     uint32_t wait_ms, const tk_acquire_opts *opts, void *user, tk_op **op_out);
/* Key sets through the queue (same rules as tk_acquire_set / tk_release_set). */
TK_API tk_status tk_queue_acquire_set(tk_queue *q, const tk_key *keys, size_t n, uint32_t lease_ms, uint32_t wait_ms,
                                      void *user, tk_op **op_out);
TK_API tk_status tk_queue_release_set(tk_queue *q, const tk_key *keys, size_t n, uint64_t token, void *user);
TK_API tk_status tk_queue_release(tk_queue *q, const tk_lease *l, void *user);
TK_API tk_status tk_queue_release_token(tk_queue *q, const void *key, size_t key_len, uint64_t token,
                                 void *user);
TK_API void tk_queue_cancel(tk_queue *q, tk_op *op);
TK_API size_t tk_queue_poll(tk_queue *q, tk_event *ev, size_t n);
TK_API size_t tk_queue_pending(tk_queue *q);
TK_API void tk_queue_free(tk_queue *q);

/* Validates a key as the server does (1..250 bytes of UTF-8, no control characters). */
TK_API int tk_key_valid(const void *key, size_t len);

#ifdef __cplusplus
}
#endif
#endif
