/* libticketing client: connection actors (one I/O thread per connection),
 * picker, ops (acquire / release state machines), background releaser. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "ticketing.h"
#include "tk_wire.h"

#define MS 1000000ull
#define MAX_MOVES 3
#define MAX_EXTRA 8
#define MAX_CONNS 64
#define NBUCKET 1024
#define REL_WINDOW_NS (5000 * MS)
#define REL_QUEUE 1024
#define MAX_WBUF (4u << 20)
#define ANSWER_ALLOWANCE_MS 3000 /* R2 default: a written acquire unanswered this long past its wait (from its write) is INDETERMINATE */
#define SPIN_YIELDS 32 /* a blocking caller yields at most this often before it sleeps on its futex, */
#define SPIN_NS (100 * 1000ull) /* and for at most this long (ns) */

enum { F_NONE, F_UNSENT, F_LOST };
enum { OWN_OP, OWN_ABANDONED, OWN_DROPPED };
enum { K_ACQUIRE, K_RELEASE };

typedef struct conn conn;

typedef struct call {
    uint8_t op;
    uint8_t key[TK_MAX_KEY];
    size_t klen;
    uint32_t lease, wait;
    uint64_t arg;
    int counts;
    conn *cn;
    uint32_t req_id;
    uint64_t seq, sent_ns;
    int pending, owner;
    tk_op *opref;
    uint8_t status, code;
    uint16_t queued;
    uint64_t value;
    char payload[TK_MAX_ERROR + 1];
    uint32_t plen;
    int fail;
    tk_status fail_st;
    uint8_t *set; /* S / X: the body (count keys); key/klen hold its first key (what a C names) */
    size_t setlen;
    uint8_t count;
    int owns_set; /* set is this call's own copy (a heap call that outlived its op) */
    int embedded; /* lives inside its tk_op: moved to the heap before the I/O thread may own it */
    int token;    /* completed by dispatch: the caller holds one of cn->tokens until it settles */
    struct call *hnext;
} call;

struct conn {
    tk_client *cl;
    char host[256], port[16], addr[300];
    pthread_t th;
    int started;
    int efd;
    pthread_mutex_t mu;
    int up, ever_up, failures;
    uint16_t features; /* protocol 1.1 feature bits of the server (§12.1), learned before up */
    uint32_t max_inflight, inflight;
    call *buckets[NBUCKET];
    uint32_t next_id;
    uint8_t *wbuf; /* frames queued, not yet taken by a writer */
    size_t wlen, wcap;
    uint8_t *obuf; /* frames taken by the writer; olen-ooff left to write */
    size_t olen, ooff, ocap;
    int writer;    /* W_NONE, W_CALLER (a caller is in send()), W_IO (the I/O thread flushes) */
    int direct;    /* plain TCP and up: callers write themselves (TLS: the I/O thread only) */
    int sfd;       /* the socket callers write to (valid while writer == W_CALLER) */
    pthread_cond_t wcv; /* writer left W_CALLER while the connection is down */
    int tokens; /* blocking callers given an answer by dispatch that have not yet run:
                 * while any, frames queued wait for the last of them, which writes them
                 * all in one send() (a burst of answers becomes one write) */
    uint64_t seq, taken;
    int kicked;
    /* I/O thread only */
    int fd;
    SSL *ssl;
    int ssl_failed; /* a TLS-level error (alert, bad record) ended the last read or write */
    char why[512];  /* why the last connect attempt failed (for the calls' status text) */
};

typedef struct endpoint {
    char addr[300];
    int first, n;
} endpoint;

typedef struct rel_job {
    uint8_t key[TK_MAX_KEY];
    size_t klen;
    uint8_t *set; /* a key set's body (heap), or NULL */
    size_t setlen;
    uint8_t count;
    uint64_t token, deadline;
} rel_job;

struct tk_client {
    unsigned fork_gen;
    int gen; /* futex: bumped when a connection comes up or the client closes */
    int gen_waiters;
    pthread_mutex_t qmu; /* the queues (tk_queue_new..free), signalled when a connection comes up */
    tk_queue *queues;
    uint8_t token[256];
    size_t tlen;
    SSL_CTX *ssl_ctx;
    char server_name[256];
    uint32_t connect_timeout_ms;
    uint64_t allowance_ns; /* R2's answer allowance */
    uint8_t label[TK_LABEL_MAX]; /* the connections' label (§12.3); label_len 0 = none */
    size_t label_len;
    void (*log)(void *, int, const char *);
    void *log_ud;

    pthread_mutex_t mu; /* pool changes, close, backoff sleeps, last error */
    pthread_cond_t cv;
    int closed;
    endpoint eps[MAX_CONNS];
    int neps, extra;
    conn *conns[MAX_CONNS];
    int nconns; /* atomic reads */
    int leader; /* endpoint index, -1 unknown (atomic) */
    unsigned rr;
    tk_status last_err;
    uint8_t last_code; /* the REJECT code of the last failed handshake, 0 when none */
    char last_msg[512]; /* why the last attempt failed (the TLS reason, the REJECT), for the calls' status text */

    /* releaser */
    pthread_t rel_th;
    pthread_mutex_t rmu;
    pthread_cond_t rcv;
    rel_job *jobs;
    size_t jhead, jcount;
};

enum { A_BLOCKING, A_OP, A_QUEUE };

struct tk_op {
    tk_client *cl;
    int kind;
    int async;  /* A_BLOCKING; A_OP (tk_acquire_start): completions lock mu and signal
                 * cv/efd; A_QUEUE (tk_queue_*): completions go onto the queue's ready list */
    int cstate; /* blocking ops (futex): CS_IDLE, CS_SLEEP (caller asleep), CS_DONE (answer in) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int efd;
    uint8_t key[TK_MAX_KEY]; /* the key; of a set its first key */
    size_t klen;
    uint8_t *set; /* a key set's body (heap, owned by the op), or NULL */
    size_t setlen;
    uint8_t count;
    uint32_t min_remaining; /* R14, ms; 0 = none */
    const char *addr;       /* the server the last attempt went to (a conn's addr: lives as long as the client) */
    uint32_t lease, wait;
    uint64_t token;
    uint64_t start, budget_end, grace_end, deadline, next_try;
    uint64_t answer_by; /* acquire written: INDETERMINATE past this (its write + wait + the allowance) */
    int moves, rounds, retries, maybe, ever_sent;
    call *c;
    int completed, cancel_req, done;
    tk_status result;
    tk_lease lease_out;
    uint8_t code;
    char msg[512];
    int reported;
    /* A_QUEUE: owned by the queue's thread except qnext, which the I/O thread
     * writes under q->mu while pushing the op onto the ready list */
    tk_queue *q;
    void *user;
    tk_op *qnext, *lprev, *lnext;
    call inl; /* the op's call, no allocation per request (last: op_init clears what precedes it) */
};

struct tk_queue {
    tk_client *cl;
    int efd;
    pthread_mutex_t mu;       /* the ready list and signalled */
    tk_op *ready, **ready_tail; /* answered ops, pushed by the I/O threads */
    int signalled;            /* efd written and not yet drained */
    /* the queue's thread only */
    tk_op *live;              /* every unfinished op (timers, free) */
    tk_op *done, **done_tail; /* finished, not yet returned by tk_queue_poll */
    tk_op *spare;             /* finished ops kept for reuse (no malloc per request) */
    size_t nspare;
    size_t pending;           /* started, not yet returned by tk_queue_poll */
    uint64_t next_timer;      /* no unfinished op needs a step before this (ns); may be early */
    int retry;                /* atomic: a connection came up, step the ops waiting for one now */
    tk_queue *cl_next;        /* the client's list of queues (cl->qmu) */
};

/* ------------------------------------------------------------------ utils */

uint64_t tk_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int64_t tk_lease_remaining_ms(const tk_lease *l) {
    return ((int64_t)l->deadline_ns - (int64_t)tk_now_ns()) / (int64_t)MS;
}

int tk_key_valid(const void *key, size_t len) { return key && tk_key_ok((const uint8_t *)key, len); }

const char *tk_strerror(tk_status s) {
    switch (s) {
    case TK_OK: return "ok";
    case TK_TIMEOUT: return "timeout: not acquired within the wait";
    case TK_BUSY: return "busy: refused at once, not queued";
    case TK_INDETERMINATE: return "indeterminate: sent without a definite answer; do not assume the lock is held";
    case TK_NOT_HOLDER: return "not holder: the key is free or held under another token";
    case TK_E_AUTH: return "authentication failed";
    case TK_E_TLS: return "TLS handshake or certificate verification failed";
    case TK_E_CONNECT: return "no connection to any server";
    case TK_E_INVALID: return "invalid argument";
    case TK_E_PROTOCOL: return "protocol violation by the server";
    case TK_E_CANCELLED: return "cancelled";
    case TK_E_CLOSED: return "client closed";
    case TK_E_NO_LEADER: return "no cluster leader within the hop limit";
    case TK_E_FORKED: return "client used after fork(); create a new client in the child";
    case TK_E_NOMEM: return "out of memory";
    case TK_E_INTERNAL: return "internal error";
    case TK_PENDING: return "pending";
    case TK_INSUFFICIENT_LEASE: return "insufficient lease: granted with less than min_remaining left, released";
    case TK_E_UNSUPPORTED: return "not supported by this server";
    }
    return "unknown status";
}

static void logf_(tk_client *cl, int level, const char *fmt, ...) {
    if (!cl->log) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    cl->log(cl->log_ud, level, buf);
}

/* snprintf(dst, n, "%s", src) without the format machinery (once per op) */
static void copy_msg(char *dst, size_t n, const char *src) {
    size_t l = strlen(src);
    if (l >= n) l = n - 1;
    memcpy(dst, src, l);
    dst[l] = 0;
}

static void abs_deadline(struct timespec *ts, uint64_t ns_from_now) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    uint64_t t = (uint64_t)ts->tv_nsec + ns_from_now;
    ts->tv_sec += (time_t)(t / 1000000000ull);
    ts->tv_nsec = (long)(t % 1000000000ull);
}

static void cond_init_mono(pthread_cond_t *cv) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

static uint64_t rand_u64(void) {
    uint64_t v = 0;
    if (RAND_bytes((unsigned char *)&v, sizeof v) != 1) v = tk_now_ns();
    return v;
}

static uint64_t jitter(uint64_t step) {
    if (step <= 1) return step;
    uint64_t half = step / 2;
    return half + rand_u64() % (step - half + 1);
}

static uint64_t step_delay(uint64_t base, uint64_t cap, int n) {
    uint64_t d = base;
    for (int i = 1; i < n && d < cap; i++) d *= 2;
    return d < cap ? d : cap;
}

/* fork detection without a getpid() system call per request */
static unsigned g_fork_gen;
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;
static void on_fork_child(void) { __atomic_add_fetch(&g_fork_gen, 1, __ATOMIC_RELAXED); }
static void fork_init(void) { pthread_atfork(NULL, NULL, on_fork_child); }
static int forked(tk_client *cl) { return cl->fork_gen != __atomic_load_n(&g_fork_gen, __ATOMIC_RELAXED); }

enum { CS_IDLE, CS_SLEEP, CS_DONE };
enum { W_NONE, W_CALLER, W_IO };

/* rel NULL: no timeout. Returns when *addr != val, on a wake-up (maybe
 * spurious) or at the timeout; callers re-check their condition. */
static void futex_wait(int *addr, int val, const struct timespec *rel) {
    syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, rel, NULL, 0);
}

static void futex_wake(int *addr, int n) { syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0); }

static void queue_signal(tk_queue *q);

static void bump_gen(tk_client *cl) {
    __atomic_add_fetch(&cl->gen, 1, __ATOMIC_RELEASE);
    if (__atomic_load_n(&cl->gen_waiters, __ATOMIC_ACQUIRE) > 0) futex_wake(&cl->gen, 1 << 30);
    pthread_mutex_lock(&cl->qmu);
    for (tk_queue *q = cl->queues; q; q = q->cl_next) {
        __atomic_store_n(&q->retry, 1, __ATOMIC_RELEASE);
        queue_signal(q);
    }
    pthread_mutex_unlock(&cl->qmu);
}

static int is_closed(tk_client *cl) { return __atomic_load_n(&cl->closed, __ATOMIC_ACQUIRE); }

/* ------------------------------------------------------------ connections */

static void wake_fd(int fd) {
    uint64_t one = 1;
    ssize_t r = write(fd, &one, sizeof one);
    (void)r;
}

static void drain_fd(int fd) {
    uint64_t v;
    ssize_t r = read(fd, &v, sizeof v);
    (void)r;
}

static void complete(tk_client *cl, call *c);
static void compensate_set(tk_client *cl, const uint8_t *key, size_t klen, const uint8_t *set, size_t setlen,
                           uint8_t count, uint64_t token);

static void call_free(call *c) {
    if (c->owns_set) free(c->set);
    free(c);
}

static int wbuf_reserve(conn *cn, size_t n) {
    if (cn->wlen + n <= cn->wcap) return 0;
    size_t nc = cn->wcap ? cn->wcap * 2 : 4096;
    while (nc < cn->wlen + n) nc *= 2;
    uint8_t *nb = realloc(cn->wbuf, nc);
    if (!nb) return -1;
    cn->wbuf = nb;
    cn->wcap = nc;
    return 0;
}

static uint32_t alloc_id(conn *cn) {
    for (;;) {
        uint32_t id = ++cn->next_id;
        if (id == 0) continue;
        call *p = cn->buckets[id % NBUCKET];
        while (p && p->req_id != id) p = p->hnext;
        if (!p) return id;
    }
}

/* Appends c's frame; cn->mu held, connection up. */
static void enqueue_locked(conn *cn, call *c) {
    uint32_t id = alloc_id(cn);
    c->cn = cn;
    c->req_id = id;
    c->seq = cn->seq++;
    c->pending = 1;
    c->hnext = cn->buckets[id % NBUCKET];
    cn->buckets[id % NBUCKET] = c;
    if (c->counts) cn->inflight++;
    uint8_t *p = cn->wbuf + cn->wlen;
    switch (c->op) {
    case 'A':
        c->sent_ns = tk_now_ns();
        cn->wlen += tk_enc_acquire(p, id, c->key, c->klen, c->lease, c->wait);
        break;
    case 'R': cn->wlen += tk_enc_release(p, id, c->key, c->klen, c->arg); break;
    case 'S':
        c->sent_ns = tk_now_ns();
        cn->wlen += tk_enc_acquire_set(p, id, c->count, c->set, c->setlen, c->lease, c->wait);
        break;
    case 'X': cn->wlen += tk_enc_release_set(p, id, c->count, c->set, c->setlen, c->arg); break;
    case 'C': cn->wlen += tk_enc_cancel(p, id, c->key, c->klen, (uint32_t)c->arg); break;
    default: cn->wlen += tk_enc_ping(p, id); break;
    }
}

enum { ENQ_OK, ENQ_DOWN, ENQ_FULL, ENQ_UNSUP };

#define MAX_CALLER_ROUNDS 4

/* cn->mu held, cn->writer == W_CALLER; returns with cn->mu released. The
 * calling thread writes every queued frame (its own and those appended
 * meanwhile) in one send() per round; what the socket does not take at once,
 * or more than MAX_CALLER_ROUNDS rounds, goes to the I/O thread. */
/* Moves the queued frames (wbuf) into the output buffer being written (obuf)
 * by swapping the two buffers; the frames queued up to now are taken. Caller
 * holds cn->mu and obuf is fully written. */
static void take_queued_locked(conn *cn) {
    uint8_t *tb = cn->obuf;
    size_t tc = cn->ocap;
    cn->obuf = cn->wbuf;
    cn->ocap = cn->wcap;
    cn->olen = cn->wlen;
    cn->ooff = 0;
    cn->wbuf = tb;
    cn->wcap = tc;
    cn->wlen = 0;
    cn->taken = cn->seq;
}

static void conn_flush_caller(conn *cn) {
    for (int round = 0;; round++) {
        if (!cn->up || cn->wlen == 0) {
            cn->writer = W_NONE;
            if (!cn->up) pthread_cond_broadcast(&cn->wcv);
            pthread_mutex_unlock(&cn->mu);
            return;
        }
        if (round == MAX_CALLER_ROUNDS) break;
        take_queued_locked(cn);
        int fd = cn->sfd;
        const uint8_t *b = cn->obuf;
        size_t n = cn->olen, off = 0;
        pthread_mutex_unlock(&cn->mu);
        int err = 0;
        while (off < n) {
            ssize_t r = send(fd, b + off, n - off, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (r > 0) {
                off += (size_t)r;
            } else if (r < 0 && errno == EINTR) {
                continue;
            } else {
                err = !(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
                break;
            }
        }
        pthread_mutex_lock(&cn->mu);
        cn->ooff = off;
        if (err) {
            /* the I/O thread sees the shut socket and kills the connection */
            shutdown(fd, SHUT_RDWR);
            cn->olen = cn->ooff = 0;
            cn->writer = W_NONE;
            pthread_cond_broadcast(&cn->wcv);
            pthread_mutex_unlock(&cn->mu);
            return;
        }
        if (off < n) break; /* socket buffer full: the I/O thread waits for POLLOUT */
        cn->olen = cn->ooff = 0;
    }
    cn->writer = W_IO;
    int kick = !cn->kicked;
    cn->kicked = 1;
    pthread_mutex_unlock(&cn->mu);
    if (kick) wake_fd(cn->efd);
}

/* cn->mu held, frames queued; gets them written and releases cn->mu.
 * defer: the caller is an event loop starting many ops in a row (tk_queue):
 * the I/O thread writes them, all in one send(), instead of one send() each. */
static void conn_push_unlock(conn *cn, int defer) {
    if (cn->direct && cn->writer == W_NONE) {
        if (cn->tokens > 0) { /* a caller about to run writes them with its own */
            pthread_mutex_unlock(&cn->mu);
            return;
        }
        if (!defer) {
            cn->writer = W_CALLER;
            conn_flush_caller(cn);
            return;
        }
        cn->writer = W_IO;
    }
    if (cn->writer == W_CALLER) { /* the thread in send() takes it in its next round */
        pthread_mutex_unlock(&cn->mu);
        return;
    }
    int kick = !cn->kicked;
    cn->kicked = 1;
    pthread_mutex_unlock(&cn->mu);
    if (kick) wake_fd(cn->efd);
}

/* A caller given its answer by dispatch runs again: the last one writes. */
static void conn_settle(conn *cn) {
    pthread_mutex_lock(&cn->mu);
    if (--cn->tokens == 0 && cn->wlen && cn->direct && cn->writer == W_NONE) {
        cn->writer = W_CALLER;
        conn_flush_caller(cn);
        return;
    }
    pthread_mutex_unlock(&cn->mu);
}

static int conn_enqueue(conn *cn, call *c) {
    pthread_mutex_lock(&cn->mu);
    if (!cn->up || cn->wlen > MAX_WBUF || wbuf_reserve(cn, TK_HDR + (c->set ? c->setlen : TK_MAX_KEY)) != 0) {
        pthread_mutex_unlock(&cn->mu);
        return ENQ_DOWN;
    }
    if (c->set && !(cn->features & TK_FEAT_KEY_SETS)) { /* §12.1: never an S or X to a 1.0 server */
        pthread_mutex_unlock(&cn->mu);
        return ENQ_UNSUP;
    }
    if (c->counts && cn->inflight >= cn->max_inflight) {
        pthread_mutex_unlock(&cn->mu);
        return ENQ_FULL;
    }
    enqueue_locked(cn, c);
    conn_push_unlock(cn, c->owner == OWN_OP && c->opref->async == A_QUEUE);
    return ENQ_OK;
}

/* cn->mu held, c pending. An embedded call is about to outlive its op:
 * moves it to the heap (relinked in place). NULL when out of memory. */
static call *detach_locked(conn *cn, call *c) {
    if (!c->embedded) return c;
    call *h = malloc(sizeof *h);
    if (!h) return NULL;
    *h = *c;
    h->embedded = 0;
    if (c->set) { /* the op's body goes with the op: the heap call keeps its own copy */
        h->set = malloc(c->setlen);
        if (!h->set) {
            free(h);
            return NULL;
        }
        memcpy(h->set, c->set, c->setlen);
        h->owns_set = 1;
    }
    call **pp = &cn->buckets[c->req_id % NBUCKET];
    while (*pp && *pp != c) pp = &(*pp)->hnext;
    if (*pp) *pp = h;
    c->pending = 0;
    return h;
}

static call *unlink_pending(conn *cn, uint32_t id) {
    call **pp = &cn->buckets[id % NBUCKET];
    while (*pp && (*pp)->req_id != id) pp = &(*pp)->hnext;
    call *c = *pp;
    if (c) {
        *pp = c->hnext;
        c->hnext = NULL;
        c->pending = 0;
        if (c->counts) cn->inflight--;
    }
    return c;
}

/* The caller gave up on c. Returns 1 when c now belongs to the I/O thread (a
 * queued acquire is withdrawn with C), 0 when it was answered already. */
static int conn_abandon(call *c) {
    conn *cn = c->cn;
    pthread_mutex_lock(&cn->mu);
    if (!c->pending || !(c = detach_locked(cn, c))) {
        pthread_mutex_unlock(&cn->mu);
        return 0;
    }
    c->owner = OWN_ABANDONED;
    c->opref = NULL;
    if ((c->op == 'A' || c->op == 'S') && c->counts && cn->up) {
        call *cc = calloc(1, sizeof *cc);
        if (cc && wbuf_reserve(cn, TK_HDR + TK_MAX_KEY) == 0) {
            cc->op = 'C';
            memcpy(cc->key, c->key, c->klen);
            cc->klen = c->klen;
            cc->arg = c->req_id;
            cc->owner = OWN_DROPPED;
            enqueue_locked(cn, cc);
            conn_push_unlock(cn, 0);
            return 1;
        }
        free(cc);
    }
    pthread_mutex_unlock(&cn->mu);
    return 1;
}

static int conn_drop(call *c) {
    conn *cn = c->cn;
    pthread_mutex_lock(&cn->mu);
    int p = c->pending && (c = detach_locked(cn, c)) != NULL;
    if (p) {
        c->owner = OWN_DROPPED;
        c->opref = NULL;
    }
    pthread_mutex_unlock(&cn->mu);
    return p;
}

static void conn_kill(conn *cn, tk_status why) {
    call *list = NULL;
    pthread_mutex_lock(&cn->mu);
    if (!cn->up) {
        pthread_mutex_unlock(&cn->mu);
        return;
    }
    cn->up = 0;
    for (int b = 0; b < NBUCKET; b++) {
        call *c = cn->buckets[b];
        cn->buckets[b] = NULL;
        while (c) {
            call *n = c->hnext;
            c->pending = 0;
            c->fail = c->seq < cn->taken ? F_LOST : F_UNSENT;
            c->fail_st = why;
            c->hnext = list;
            list = c;
            c = n;
        }
    }
    cn->inflight = 0;
    cn->wlen = 0;
    pthread_mutex_unlock(&cn->mu);
    while (list) {
        call *n = list->hnext;
        complete(cn->cl, list);
        list = n;
    }
}

static int fits(uint8_t op, uint8_t st) {
    if (st == 'E') return 1;
    switch (op) {
    case 'A':
    case 'S': return st == 'G' || st == 'T' || st == 'B' || st == 'M' || st == 'U';
    case 'R':
    case 'X':
    case 'C': return st == 'O' || st == 'N' || st == 'M' || st == 'U';
    case 'P': return st == 'P';
    }
    return 0;
}

#define DISPATCH_BATCH 128

/* Decodes every complete response; returns bytes consumed or -1. Frames are
 * decoded outside the lock, then matched in one short locked pass per batch;
 * only the callers whose answers arrived are woken, after the lock. */
static long dispatch(conn *cn, const uint8_t *buf, size_t len) {
    size_t off = 0;
    int bad = 0, more = 1;
    while (more && !bad) {
        tk_resp rs[DISPATCH_BATCH];
        int nr = 0;
        while (nr < DISPATCH_BATCH) {
            size_t used;
            int d = tk_dec_resp(buf + off, len - off, &rs[nr], &used);
            if (d < 0) {
                bad = 1;
                break;
            }
            if (d == 0) {
                more = 0;
                break;
            }
            off += used;
            if (rs[nr].status == 'E' && rs[nr].code == TK_CODE_DUPLICATE_REQ_ID) continue; /* §2.1: never completes */
            nr++;
        }
        if (nr == 0) break;
        call *done = NULL, **tail = &done;
        pthread_mutex_lock(&cn->mu);
        for (int i = 0; i < nr; i++) {
            const tk_resp *rp = &rs[i];
            call *c = cn->buckets[rp->req_id % NBUCKET];
            while (c && c->req_id != rp->req_id) c = c->hnext;
            if (!c) continue; /* unknown req_id: ignored */
            if (!fits(c->op, rp->status)) {
                bad = 1;
                break;
            }
            unlink_pending(cn, rp->req_id);
            c->status = rp->status;
            c->code = rp->code;
            c->queued = rp->queued;
            c->value = rp->value;
            c->plen = 0;
            if (rp->payload_len && rp->status != 'J') {
                c->plen = rp->payload_len > TK_MAX_ERROR ? TK_MAX_ERROR : rp->payload_len;
                memcpy(c->payload, rp->payload, c->plen);
            }
            c->payload[c->plen] = 0;
            c->fail = F_NONE;
            if (c->owner == OWN_OP && c->opref->async == A_BLOCKING) {
                c->token = 1;
                cn->tokens++;
            }
            *tail = c;
            tail = &c->hnext;
        }
        pthread_mutex_unlock(&cn->mu);
        while (done) {
            call *n = done->hnext;
            done->hnext = NULL;
            complete(cn->cl, done);
            done = n;
        }
    }
    return bad ? -1 : (long)off;
}

/* ---- socket I/O (plain or TLS), non-blocking */

/* >0 bytes, 0 would block, -1 error/EOF */
static ssize_t io_read(conn *cn, void *b, size_t n, int *want_write) {
    *want_write = 0;
    if (cn->ssl) {
        int r = SSL_read(cn->ssl, b, (int)n);
        if (r > 0) return r;
        int e = SSL_get_error(cn->ssl, r);
        if (e == SSL_ERROR_WANT_READ) return 0;
        if (e == SSL_ERROR_WANT_WRITE) {
            *want_write = 1;
            return 0;
        }
        if (e == SSL_ERROR_SSL) cn->ssl_failed = 1;
        return -1;
    }
    ssize_t r = recv(cn->fd, b, n, 0);
    if (r > 0) return r;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
    return -1;
}

static ssize_t io_write(conn *cn, const void *b, size_t n) {
    if (cn->ssl) {
        int r = SSL_write(cn->ssl, b, (int)n);
        if (r > 0) return r;
        int e = SSL_get_error(cn->ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return 0;
        if (e == SSL_ERROR_SSL) cn->ssl_failed = 1;
        return -1;
    }
    ssize_t r = send(cn->fd, b, n, MSG_NOSIGNAL);
    if (r >= 0) return r;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
    return -1;
}

/* Waits for ev on the socket until deadline; 1 ready, 0 timeout, -1 closed. */
static int wait_sock(conn *cn, short ev, uint64_t deadline) {
    for (;;) {
        if (is_closed(cn->cl)) return -1;
        uint64_t now = tk_now_ns();
        if (now >= deadline) return 0;
        struct pollfd p[2] = {{cn->fd, ev, 0}, {cn->efd, POLLIN, 0}};
        int ms = (int)((deadline - now) / MS) + 1;
        int r = poll(p, 2, ms);
        if (r < 0 && errno != EINTR) return -1;
        if (r > 0 && (p[1].revents & POLLIN)) drain_fd(cn->efd);
        if (r > 0 && p[0].revents) return 1;
    }
}

static int read_full(conn *cn, uint8_t *b, size_t n, uint64_t deadline) {
    size_t got = 0;
    while (got < n) {
        int ww;
        ssize_t r = io_read(cn, b + got, n - got, &ww);
        if (r < 0) return -1;
        if (r > 0) {
            got += (size_t)r;
            continue;
        }
        if (wait_sock(cn, ww ? POLLOUT : POLLIN, deadline) != 1) return -1;
    }
    return 0;
}

static int write_full(conn *cn, const uint8_t *b, size_t n, uint64_t deadline) {
    size_t put = 0;
    while (put < n) {
        ssize_t r = io_write(cn, b + put, n - put);
        if (r < 0) return -1;
        if (r > 0) {
            put += (size_t)r;
            continue;
        }
        if (wait_sock(cn, POLLOUT | POLLIN, deadline) != 1) return -1;
    }
    return 0;
}

static void close_sock(conn *cn) {
    if (cn->ssl) {
        SSL_free(cn->ssl);
        cn->ssl = NULL;
    }
    if (cn->fd >= 0) {
        close(cn->fd);
        cn->fd = -1;
    }
}

/* Dial + TLS + handshake. Returns TK_OK and max_inflight. */
static tk_status conn_connect(conn *cn, uint32_t *max_inflight, uint8_t *rej_code) {
    tk_client *cl = cn->cl;
    snprintf(cn->why, sizeof cn->why, "no connection to %s", cn->addr);
    uint64_t deadline = tk_now_ns() + (uint64_t)cl->connect_timeout_ms * MS;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(cn->host, cn->port, &hints, &res) != 0 || !res) {
        snprintf(cn->why, sizeof cn->why, "cannot resolve %s", cn->addr);
        return TK_E_CONNECT;
    }
    tk_status st = TK_E_CONNECT;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        cn->fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (cn->fd < 0) continue;
        int r = connect(cn->fd, ai->ai_addr, ai->ai_addrlen);
        int err = r == 0 ? 0 : errno;
        if (r == 0 || errno == EINPROGRESS) {
            if (r == 0 || wait_sock(cn, POLLOUT, deadline) == 1) {
                socklen_t el = sizeof err;
                err = 0;
                getsockopt(cn->fd, SOL_SOCKET, SO_ERROR, &err, &el);
                if (err == 0) break;
            } else {
                err = ETIMEDOUT;
            }
        }
        snprintf(cn->why, sizeof cn->why, "dial %s: %s", cn->addr, strerror(err));
        close(cn->fd);
        cn->fd = -1;
    }
    freeaddrinfo(res);
    if (cn->fd < 0) return is_closed(cl) ? TK_E_CLOSED : TK_E_CONNECT;
    int one = 1, idle = 15, intvl = 5, cnt = 3;
    setsockopt(cn->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(cn->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(cn->fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(cn->fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(cn->fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);

    if (cl->ssl_ctx) {
        cn->ssl = SSL_new(cl->ssl_ctx);
        if (!cn->ssl) return TK_E_TLS;
        SSL_set_fd(cn->ssl, cn->fd);
        const char *name = cl->server_name[0] ? cl->server_name : cn->host;
        struct in6_addr a6;
        struct in_addr a4;
        int is_ip = inet_pton(AF_INET, name, &a4) == 1 || inet_pton(AF_INET6, name, &a6) == 1;
        X509_VERIFY_PARAM *vp = SSL_get0_param(cn->ssl);
        if (is_ip) {
            X509_VERIFY_PARAM_set1_ip_asc(vp, name);
        } else {
            SSL_set_tlsext_host_name(cn->ssl, name);
            X509_VERIFY_PARAM_set1_host(vp, name, 0);
        }
        for (;;) {
            ERR_clear_error();
            int r = SSL_connect(cn->ssl);
            if (r == 1) break;
            int e = SSL_get_error(cn->ssl, r);
            short ev = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
            if (!ev) {
                long vr = SSL_get_verify_result(cn->ssl);
                unsigned long ee = ERR_peek_last_error();
                const char *reason = vr != X509_V_OK ? X509_verify_cert_error_string(vr)
                                     : ee ? ERR_reason_error_string(ee) : NULL;
                /* R5: a plaintext server answers the ClientHello with bytes that are not TLS */
                /* R5, §12.4: a plaintext server's HELLO ("TKTS") is not a TLS record */
                if (ee && (ERR_GET_REASON(ee) == SSL_R_WRONG_VERSION_NUMBER || ERR_GET_REASON(ee) == SSL_R_PACKET_LENGTH_TOO_LONG ||
                           ERR_GET_REASON(ee) == SSL_R_RECORD_LENGTH_MISMATCH))
                    reason = "the server does not speak TLS (a plaintext ticketing server?)";
                else if (!reason)
                    reason = "handshake error";
                snprintf(cn->why, sizeof cn->why, "TLS with %s: %s", cn->addr, reason);
                logf_(cl, 2, "ticketing: TLS handshake with %s failed: %s", cn->addr, reason);
                return TK_E_TLS;
            }
            int w = wait_sock(cn, ev, deadline);
            if (w != 1) {
                snprintf(cn->why, sizeof cn->why, "no TLS handshake from %s within %u ms", cn->addr, cl->connect_timeout_ms);
                return w < 0 ? TK_E_CLOSED : TK_E_CONNECT;
            }
        }
    }

    uint8_t hb[TK_HELLO_LEN], wb[TK_WELCOME_LEN], cnonce[32], proof[32];
    tk_hello h;
    tk_welcome w;
    cn->ssl_failed = 0;
    if (read_full(cn, hb, sizeof hb, deadline) != 0) {
        if (cn->ssl_failed) {
            snprintf(cn->why, sizeof cn->why, "TLS with %s: the server ended the session (a client certificate required?)", cn->addr);
            logf_(cl, 2, "ticketing: TLS error from %s (a client certificate required?)", cn->addr);
        }
        return is_closed(cl) ? TK_E_CLOSED : cn->ssl_failed ? TK_E_TLS : st;
    }
    int hd = tk_dec_hello(hb, &h);
    if (hd == -2) { /* a REJECT where HELLO belongs: a TLS listener's hint (§12.4) */
        *rej_code = h.flags;
        if (h.flags == TK_CODE_TLS_REQUIRED && !cn->ssl) {
            snprintf(cn->why, sizeof cn->why, "%s: the server requires TLS (REJECT TLS_REQUIRED); configure tls", cn->addr);
            logf_(cl, 3, "ticketing: %s requires TLS; configure tls", cn->addr);
            return TK_E_TLS;
        }
        snprintf(cn->why, sizeof cn->why, "%s rejected the connection before HELLO (code %u)", cn->addr, h.flags);
        return TK_E_CONNECT;
    }
    if (hd != 0) {
        snprintf(cn->why, sizeof cn->why, "%s does not speak the ticketing protocol (bad HELLO)", cn->addr);
        return TK_E_PROTOCOL;
    }
    if (RAND_bytes(cnonce, 32) != 1) return TK_E_INTERNAL;
    tk_proof('c', cl->token, cl->tlen, 1, h.nonce, cnonce, proof);
    uint8_t out[TK_AUTH_LEN + TK_HDR];
    tk_enc_auth(out, 1, cnonce, proof);
    /* §12.1: the feature ping goes right behind AUTH (req_id 1, before any request) */
    tk_enc_ping_features(out + TK_AUTH_LEN, 1);
    if (write_full(cn, out, sizeof out, deadline) != 0) return cn->ssl_failed ? TK_E_TLS : st;
    if (read_full(cn, wb, sizeof wb, deadline) != 0) return is_closed(cl) ? TK_E_CLOSED : cn->ssl_failed ? TK_E_TLS : st;
    if (tk_dec_welcome(wb, &w) != 0) return TK_E_PROTOCOL;
    if (w.status == 'E') {
        *rej_code = w.code;
        if (w.code == TK_CODE_AUTH_FAILED) {
            snprintf(cn->why, sizeof cn->why, "%s rejected the credentials (AUTH_FAILED)%s", cn->addr,
                     cl->tlen == 0 && (h.flags & 1) ? ": the server requires a token and none is configured" : "");
            logf_(cl, 3, "ticketing: %s rejected the credentials%s", cn->addr,
                  cl->tlen == 0 && (h.flags & 1) ? " (the server requires a token and none is configured)" : "");
            return TK_E_AUTH;
        }
        return TK_E_CONNECT;
    }
    if (cl->tlen > 0) {
        uint8_t want[32];
        tk_proof('s', cl->token, cl->tlen, 1, h.nonce, cnonce, want);
        if (CRYPTO_memcmp(want, w.proof, 32) != 0) {
            snprintf(cn->why, sizeof cn->why, "%s did not prove the token (an impostor?)", cn->addr);
            logf_(cl, 3, "ticketing: %s did not prove the token (an impostor?)", cn->addr);
            return TK_E_AUTH;
        }
    }
    /* the pong: the feature bits in its queued field (0 from a 1.0 server) */
    uint8_t pb[TK_HDR + TK_MAX_ERROR];
    tk_resp pr;
    if (read_full(cn, pb, TK_HDR, deadline) != 0) return is_closed(cl) ? TK_E_CLOSED : cn->ssl_failed ? TK_E_TLS : st;
    size_t used = 0;
    if (tk_dec_resp(pb, TK_HDR, &pr, &used) != 1 || pr.status != 'P' || pr.req_id != 1) {
        snprintf(cn->why, sizeof cn->why, "%s answered the feature ping with '%c' (protocol violation)", cn->addr,
                 pb[0] >= 0x20 && pb[0] < 0x7f ? pb[0] : '?');
        return TK_E_PROTOCOL;
    }
    cn->features = pr.queued;
    if (cl->label_len && (cn->features & TK_FEAT_LABELS)) { /* §12.3: before the first lock request */
        uint8_t lb[TK_HDR + TK_LABEL_MAX];
        size_t n = tk_enc_label(lb, 2, cl->label, cl->label_len);
        if (write_full(cn, lb, n, deadline) != 0) return cn->ssl_failed ? TK_E_TLS : st;
        if (read_full(cn, pb, TK_HDR, deadline) != 0) return is_closed(cl) ? TK_E_CLOSED : st;
        int d = tk_dec_resp(pb, TK_HDR, &pr, &used);
        if (d == 0 && used <= sizeof pb) {
            if (read_full(cn, pb + TK_HDR, used - TK_HDR, deadline) != 0) return is_closed(cl) ? TK_E_CLOSED : st;
            d = tk_dec_resp(pb, used, &pr, &used);
        }
        if (d != 1 || pr.req_id != 2 || (pr.status != 'O' && pr.status != 'E')) {
            snprintf(cn->why, sizeof cn->why, "%s answered the label with '%c' (protocol violation)", cn->addr,
                     pb[0] >= 0x20 && pb[0] < 0x7f ? pb[0] : '?');
            return TK_E_PROTOCOL;
        }
        if (pr.status == 'E') logf_(cl, 2, "ticketing: %s refused the connection label (code %u)", cn->addr, pr.code);
    }
    *max_inflight = w.max_inflight ? w.max_inflight : 1;
    return TK_OK;
}

static void set_last_err(tk_client *cl, tk_status st, uint8_t code, const char *why) {
    pthread_mutex_lock(&cl->mu);
    cl->last_err = st;
    cl->last_code = code;
    copy_msg(cl->last_msg, sizeof cl->last_msg, why ? why : "");
    pthread_cond_broadcast(&cl->cv);
    pthread_mutex_unlock(&cl->mu);
}

/* The I/O thread: reads every answer (many per read) and dispatches; writes
 * only when it owns the writer role (always on TLS, where one SSL object
 * must not be used by two threads at once; on plain TCP when a caller's
 * send() found the socket buffer full). */
static tk_status conn_serve(conn *cn) {
    size_t rcap = 64 * 1024, rlen = 0;
    uint8_t *rbuf = malloc(rcap);
    tk_status why = TK_E_CONNECT;
    if (!rbuf) return TK_E_NOMEM;
    for (;;) {
        if (is_closed(cn->cl)) {
            why = TK_E_CLOSED;
            break;
        }
        int owns = 0, out_left = 0;
        pthread_mutex_lock(&cn->mu);
        cn->kicked = 0;
        if (!cn->direct || cn->writer == W_IO) {
            owns = 1;
            if (cn->ooff == cn->olen && cn->wlen) {
                take_queued_locked(cn);
            }
        }
        pthread_mutex_unlock(&cn->mu);
        if (owns) {
            /* obuf/olen/ooff belong to this thread while it owns the role */
            while (cn->ooff < cn->olen) {
                ssize_t w = io_write(cn, cn->obuf + cn->ooff, cn->olen - cn->ooff);
                if (w < 0) goto dead;
                if (w == 0) break;
                cn->ooff += (size_t)w;
            }
            pthread_mutex_lock(&cn->mu);
            if (cn->ooff == cn->olen) {
                cn->ooff = cn->olen = 0;
                if (cn->wlen) {
                    out_left = 1; /* appended meanwhile: next round */
                } else if (cn->direct) {
                    cn->writer = W_NONE; /* callers write again */
                }
            } else {
                out_left = 1;
            }
            pthread_mutex_unlock(&cn->mu);
        }
        /* read everything available */
        int want_write = 0;
        for (;;) {
            if (rcap - rlen < 4096) {
                size_t nc = rcap * 2;
                uint8_t *nb = realloc(rbuf, nc);
                if (!nb) {
                    why = TK_E_NOMEM;
                    goto dead;
                }
                rbuf = nb;
                rcap = nc;
            }
            size_t room = rcap - rlen;
            ssize_t r = io_read(cn, rbuf + rlen, room, &want_write);
            if (r < 0) goto dead;
            if (r == 0) break;
            rlen += (size_t)r;
            long used = dispatch(cn, rbuf, rlen);
            if (used < 0) {
                logf_(cn->cl, 3, "ticketing: protocol violation by %s; reconnecting", cn->addr);
                why = TK_E_PROTOCOL;
                goto dead;
            }
            memmove(rbuf, rbuf + used, rlen - (size_t)used);
            rlen -= (size_t)used;
            if (rlen == 0 && rcap > 1024 * 1024) {
                uint8_t *nb = realloc(rbuf, 64 * 1024);
                if (nb) {
                    rbuf = nb;
                    rcap = 64 * 1024;
                }
            }
            if (!cn->ssl && (size_t)r < room) break; /* drained: poll, not another recv for EAGAIN */
        }
        if (cn->ssl && SSL_pending(cn->ssl) > 0) continue;
        if (owns && out_left && cn->ooff == 0 && cn->olen == 0) continue; /* more queued: write it now */
        short ev = POLLIN | ((owns && out_left) || want_write ? POLLOUT : 0);
        struct pollfd p[2] = {{cn->fd, ev, 0}, {cn->efd, POLLIN, 0}};
        int pr = poll(p, 2, -1);
        if (pr < 0 && errno != EINTR) goto dead;
        if (pr > 0 && (p[1].revents & POLLIN)) drain_fd(cn->efd);
    }
dead:
    free(rbuf);
    return why;
}

static void *conn_main(void *arg) {
    conn *cn = arg;
    tk_client *cl = cn->cl;
    int attempt = 0;
    while (!is_closed(cl)) {
        if (attempt > 0) {
            uint64_t d = jitter(step_delay(100 * MS, 3200 * MS, attempt));
            struct timespec ts;
            abs_deadline(&ts, d);
            pthread_mutex_lock(&cl->mu);
            while (!cl->closed) {
                if (pthread_cond_timedwait(&cl->cv, &cl->mu, &ts) == ETIMEDOUT) break;
            }
            pthread_mutex_unlock(&cl->mu);
            if (is_closed(cl)) break;
        }
        uint32_t mi = 1;
        uint8_t rej = 0;
        tk_status st = conn_connect(cn, &mi, &rej);
        if (st != TK_OK) {
            close_sock(cn);
            if (is_closed(cl)) break;
            pthread_mutex_lock(&cn->mu);
            cn->failures++;
            int n = cn->failures;
            pthread_mutex_unlock(&cn->mu);
            if (n == 1 || st == TK_E_AUTH) logf_(cl, 2, "ticketing: connect to %s failed: %s", cn->addr, tk_strerror(st));
            set_last_err(cl, st, rej, cn->why);
            if (st == TK_E_AUTH || st == TK_E_TLS) bump_gen(cl); /* callers waiting for a connection fail now (R4/R5) */
            attempt++;
            continue;
        }
        pthread_mutex_lock(&cn->mu);
        cn->up = 1;
        cn->ever_up = 1;
        cn->failures = 0;
        cn->max_inflight = mi > (1u << 30) ? (1u << 30) : mi;
        cn->inflight = 0;
        cn->next_id = 0;
        cn->seq = cn->taken = 0;
        cn->wlen = 0;
        cn->olen = cn->ooff = 0;
        cn->writer = W_NONE;
        cn->direct = cn->ssl == NULL;
        cn->sfd = cn->fd;
        cn->kicked = 0;
        pthread_mutex_unlock(&cn->mu);
        logf_(cl, 1, "ticketing: connected to %s (max_inflight %u)", cn->addr, mi);
        set_last_err(cl, TK_OK, 0, NULL);
        bump_gen(cl);
        tk_status why = conn_serve(cn);
        conn_kill(cn, why);
        /* no caller may be in send() on the socket when it is closed */
        pthread_mutex_lock(&cn->mu);
        while (cn->writer == W_CALLER) pthread_cond_wait(&cn->wcv, &cn->mu);
        cn->writer = W_NONE;
        cn->direct = 0;
        cn->olen = cn->ooff = 0;
        pthread_mutex_unlock(&cn->mu);
        close_sock(cn);
        if (!is_closed(cl)) logf_(cl, 2, "ticketing: connection to %s lost", cn->addr);
        attempt = 1;
    }
    conn_kill(cn, TK_E_CLOSED);
    return NULL;
}

static int split_addr(const char *a, char *host, size_t hl, char *port, size_t pl) {
    const char *colon = strrchr(a, ':');
    if (!colon || colon == a || !colon[1]) return -1;
    const char *h = a, *he = colon;
    if (*h == '[') {
        if (he[-1] != ']') return -1;
        h++;
        he--;
    }
    size_t n = (size_t)(he - h);
    if (n == 0 || n >= hl || strlen(colon + 1) >= pl) return -1;
    memcpy(host, h, n);
    host[n] = 0;
    strcpy(port, colon + 1);
    for (const char *p = port; *p; p++)
        if (*p < '0' || *p > '9') return -1;
    return 0;
}

/* cl->mu held. Adds an endpoint with n connections; returns its index or -1. */
static int add_endpoint(tk_client *cl, const char *addr, int n) {
    char host[256], port[16];
    if (split_addr(addr, host, sizeof host, port, sizeof port) != 0) return -1;
    if (cl->neps >= MAX_CONNS || cl->nconns + n > MAX_CONNS) return -1;
    endpoint *ep = &cl->eps[cl->neps];
    snprintf(ep->addr, sizeof ep->addr, "%s", addr);
    ep->first = cl->nconns;
    ep->n = n;
    for (int i = 0; i < n; i++) {
        conn *cn = calloc(1, sizeof *cn);
        if (!cn) return -1;
        cn->cl = cl;
        snprintf(cn->host, sizeof cn->host, "%s", host);
        snprintf(cn->port, sizeof cn->port, "%s", port);
        snprintf(cn->addr, sizeof cn->addr, "%s", addr);
        cn->fd = -1;
        cn->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        pthread_mutexattr_t ma;
        pthread_mutexattr_init(&ma);
        pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP); /* short hold times: spin before sleeping */
        pthread_mutex_init(&cn->mu, &ma);
        pthread_mutexattr_destroy(&ma);
        pthread_cond_init(&cn->wcv, NULL);
        cl->conns[cl->nconns + i] = cn;
        if (pthread_create(&cn->th, NULL, conn_main, cn) == 0) cn->started = 1;
    }
    __atomic_store_n(&cl->nconns, cl->nconns + n, __ATOMIC_RELEASE);
    return cl->neps++;
}

static void follow(tk_client *cl, const char *addr) {
    if (!addr[0]) {
        __atomic_store_n(&cl->leader, -1, __ATOMIC_RELEASE);
        return;
    }
    pthread_mutex_lock(&cl->mu);
    int idx = -1;
    for (int i = 0; i < cl->neps; i++)
        if (strcmp(cl->eps[i].addr, addr) == 0) idx = i;
    if (idx < 0 && !cl->closed && cl->extra < MAX_EXTRA) {
        idx = add_endpoint(cl, addr, 1);
        if (idx >= 0) {
            cl->extra++;
            logf_(cl, 1, "ticketing: following the leader to %s", addr);
        }
    }
    __atomic_store_n(&cl->leader, idx, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&cl->mu);
}

static int conn_is_connecting(conn *cn) {
    pthread_mutex_lock(&cn->mu);
    int r = !cn->up && !cn->ever_up && cn->failures == 0;
    pthread_mutex_unlock(&cn->mu);
    return r;
}

/* Whether any connection is being opened for the first time (R1's grace). */
static int first_connecting(tk_client *cl) {
    int nc = __atomic_load_n(&cl->nconns, __ATOMIC_ACQUIRE);
    for (int i = 0; i < nc; i++)
        if (conn_is_connecting(cl->conns[i])) return 1;
    return 0;
}

/* Leader first, then round robin. */
static int try_enqueue(tk_client *cl, call *c) {
    unsigned r = __atomic_add_fetch(&cl->rr, 1, __ATOMIC_RELAXED);
    int res = ENQ_DOWN;
    int li = __atomic_load_n(&cl->leader, __ATOMIC_ACQUIRE);
    int nc = __atomic_load_n(&cl->nconns, __ATOMIC_ACQUIRE);
    if (li >= 0) {
        endpoint *ep = &cl->eps[li];
        int connecting = 0;
        for (int i = 0; i < ep->n; i++) {
            conn *cn = cl->conns[ep->first + (int)((r + (unsigned)i) % (unsigned)ep->n)];
            int e = conn_enqueue(cn, c);
            if (e == ENQ_OK) return ENQ_OK;
            if (e == ENQ_FULL) res = ENQ_FULL;
            if (e == ENQ_UNSUP && res == ENQ_DOWN) res = ENQ_UNSUP;
            connecting |= conn_is_connecting(cn);
        }
        if (res == ENQ_FULL || res == ENQ_UNSUP || connecting) return res;
    }
    for (int i = 0; i < nc; i++) {
        int e = conn_enqueue(cl->conns[(r + (unsigned)i) % (unsigned)nc], c);
        if (e == ENQ_OK) return ENQ_OK;
        if (e == ENQ_FULL) res = ENQ_FULL;
        if (e == ENQ_UNSUP && res == ENQ_DOWN) res = ENQ_UNSUP;
    }
    return res;
}

/* ------------------------------------------------------------------- ops */

static void op_notify(tk_op *op) {
    pthread_mutex_lock(&op->mu);
    op->completed = 1;
    pthread_cond_broadcast(&op->cv);
    if (op->efd >= 0) wake_fd(op->efd);
    pthread_mutex_unlock(&op->mu);
}

static void queue_push(tk_queue *q, tk_op *op);

static void complete(tk_client *cl, call *c) {
    switch (c->owner) {
    case OWN_OP: {
        tk_op *op = c->opref;
        if (op->async == A_QUEUE) {
            queue_push(op->q, op); /* op belongs to the queue's thread from here */
        } else if (op->async) {
            op_notify(op);
        } else if (__atomic_exchange_n(&op->cstate, CS_DONE, __ATOMIC_ACQ_REL) == CS_SLEEP) {
            /* only this caller; op may be gone once CS_DONE is visible, and a
             * late wake-up of a reused address is tolerated (waiters re-check) */
            futex_wake(&op->cstate, 1);
        }
        break;
    }
    case OWN_ABANDONED:
        if ((c->op == 'A' || c->op == 'S') && c->fail == F_NONE && c->status == 'G') {
            logf_(cl, 1, "ticketing: releasing a grant that arrived after its acquire was cancelled");
            compensate_set(cl, c->key, c->klen, c->set, c->setlen, c->count, c->value);
        }
        call_free(c);
        break;
    default: call_free(c); break;
    }
}

static const char *code_name(uint8_t code) {
    switch (code) {
    case TK_CODE_QUEUE_FULL: return "QUEUE_FULL";
    case TK_CODE_OVERLOADED: return "OVERLOADED";
    case TK_CODE_CLOCK_UNHEALTHY: return "CLOCK_UNHEALTHY";
    case TK_CODE_SHUTTING_DOWN: return "SHUTTING_DOWN";
    case TK_CODE_NO_QUORUM: return "NO_QUORUM";
    case TK_CODE_BAD_HANDSHAKE: return "BAD_HANDSHAKE";
    case TK_CODE_AUTH_FAILED: return "AUTH_FAILED";
    case TK_CODE_TLS_REQUIRED: return "TLS_REQUIRED";
    case TK_CODE_BAD_OP: return "BAD_OP";
    case TK_CODE_BAD_KEY: return "BAD_KEY";
    case TK_CODE_BAD_LEASE: return "BAD_LEASE";
    case TK_CODE_BAD_WAIT: return "BAD_WAIT";
    case TK_CODE_BAD_FLAGS: return "BAD_FLAGS";
    case TK_CODE_DUPLICATE_REQ_ID: return "DUPLICATE_REQ_ID";
    case TK_CODE_BAD_ADMIN: return "BAD_ADMIN";
    case TK_CODE_NOT_PERMITTED: return "NOT_PERMITTED";
    case TK_CODE_INTERNAL: return "INTERNAL";
    case TK_CODE_BAD_KEYSET: return "BAD_KEYSET";
    case TK_CODE_BAD_LABEL: return "BAD_LABEL";
    }
    return NULL;
}

static __thread char g_errmsg[640]; /* tk_errmsg(): the calling thread's last failure */

const char *tk_errmsg(void) { return g_errmsg; }

/* The op and its key(s) as a message starts: `acquire "k"`, `acquire_set "a", "b"`. */
static size_t what_of(char *b, size_t n, int kind, const uint8_t *key, size_t klen, const uint8_t *set, size_t setlen) {
    size_t o = 0;
    int w = snprintf(b, n, "%s%s ", kind == K_ACQUIRE ? "acquire" : "release", set ? "_set" : "");
    o = w > 0 && (size_t)w < n ? (size_t)w : 0;
    if (!set) {
        w = snprintf(b + o, n - o, "\"%.*s\"", (int)klen, (const char *)key);
    } else {
        w = 0;
        for (size_t off = 0; off < setlen && o + (size_t)w + 4 < n;) {
            size_t kl = set[off];
            int x = snprintf(b + o + w, n - o - (size_t)w, "%s\"%.*s\"", off ? ", " : "", (int)kl, (const char *)set + off + 1);
            if (x < 0) break;
            w += x;
            off += 1 + kl;
        }
    }
    o += w > 0 ? (size_t)w : 0;
    return o < n ? o : n - 1;
}

/* R15: `<op> "<key>" at <addr>: <reason>`, the code named once. */
static void where_msg(char *b, size_t n, tk_op *op, tk_status st, uint8_t code, const char *msg) {
    size_t o = what_of(b, n, op->kind, op->key, op->klen, op->set, op->setlen);
    const char *addr = op->addr ? op->addr : op->cl->neps ? op->cl->eps[0].addr : "";
    const char *cn = code_name(code);
    if (msg && msg[0]) {
        if (cn && (st == TK_BUSY || st == TK_E_INVALID || st == TK_INDETERMINATE) && !strstr(msg, cn))
            snprintf(b + o, n - o, " at %s: %s (%s)", addr, msg, cn);
        else
            snprintf(b + o, n - o, " at %s: %s", addr, msg);
        return;
    }
    switch (st) {
    case TK_BUSY: snprintf(b + o, n - o, " at %s: busy (%s), not queued", addr, cn ? cn : "no code"); return;
    case TK_TIMEOUT: snprintf(b + o, n - o, " at %s: timeout, not acquired within the wait", addr); return;
    default: snprintf(b + o, n - o, " at %s: %s%s%s%s", addr, tk_strerror(st), cn ? " (" : "", cn ? cn : "", cn ? ")" : "");
    }
}

static void op_finish(tk_op *op, tk_status st, uint8_t code, const char *msg) {
    op->done = 1;
    op->result = st;
    op->code = code;
    if (st == TK_OK)
        copy_msg(op->msg, sizeof op->msg, "ok");
    else
        where_msg(op->msg, sizeof op->msg, op, st, code, msg);
    if (op->async == A_OP) {
        if (op->efd >= 0) wake_fd(op->efd);
        pthread_cond_broadcast(&op->cv);
    }
}

static tk_status connect_failure(tk_client *cl) {
    pthread_mutex_lock(&cl->mu);
    tk_status st = cl->last_err;
    pthread_mutex_unlock(&cl->mu);
    if (st == TK_E_AUTH || st == TK_E_TLS) return st;
    return TK_E_CONNECT;
}

static uint64_t redirect_delay(int n) { return jitter(step_delay(25 * MS, 200 * MS, n)); }

/* Interprets the answer of op->c (op->mu held). */
static void op_answer(tk_op *op, call *c, uint64_t now) {
    tk_client *cl = op->cl;
    if (c->cn) op->addr = c->cn->addr;
    if (op->kind == K_ACQUIRE) {
        if (op->cancel_req) {
            if (c->fail == F_NONE && c->status == 'G') compensate_set(cl, op->key, op->klen, op->set, op->setlen, op->count, c->value);
            op_finish(op, TK_E_CANCELLED, 0, NULL);
            return;
        }
        if (c->fail == F_LOST) {
            op_finish(op, is_closed(cl) ? TK_E_CLOSED : TK_INDETERMINATE, 0,
                      is_closed(cl) ? NULL : "connection lost after the request was written");
            return;
        }
        if (c->fail == F_UNSENT) {
            if (is_closed(cl)) op_finish(op, TK_E_CLOSED, 0, NULL);
            return; /* never written: retry */
        }
        switch (c->status) {
        case 'G':
            memset(&op->lease_out, 0, sizeof op->lease_out);
            memcpy(op->lease_out.key, op->key, op->klen);
            op->lease_out.key_len = op->klen;
            op->lease_out.token = c->value;
            op->lease_out.deadline_ns = c->sent_ns + (uint64_t)c->queued * 16 * MS + (uint64_t)op->lease * MS;
            if (op->min_remaining) { /* R14: too little of the lease left to work in: give it back */
                int64_t left = tk_lease_remaining_ms(&op->lease_out);
                if (left < (int64_t)op->min_remaining) {
                    compensate_set(cl, op->key, op->klen, op->set, op->setlen, op->count, c->value);
                    char m[128];
                    snprintf(m, sizeof m, "granted with %lld ms of the lease left, below min_remaining %u ms: released",
                             (long long)left, op->min_remaining);
                    memset(&op->lease_out, 0, sizeof op->lease_out);
                    op_finish(op, TK_INSUFFICIENT_LEASE, 0, m);
                    return;
                }
            }
            op_finish(op, TK_OK, 0, "ok");
            return;
        case 'T': op_finish(op, TK_TIMEOUT, 0, NULL); return;
        case 'B': op_finish(op, TK_BUSY, c->code, NULL); return;
        case 'U': op_finish(op, TK_INDETERMINATE, c->code, "the cluster could not confirm the commit"); return;
        case 'E': op_finish(op, TK_E_INVALID, c->code, c->payload[0] ? c->payload : NULL); return;
        case 'M':
            follow(cl, c->payload);
            op->grace_end = now + 1000 * MS; /* R1: a leader's new connection may take 1 s past the wait */
            if (++op->moves > MAX_MOVES) {
                uint64_t d = redirect_delay(++op->rounds);
                if (op->wait == 0 || op->budget_end <= now + d) {
                    op_finish(op, TK_E_NO_LEADER, 0, NULL);
                    return;
                }
                op->next_try = now + d;
                op->moves = 0;
            }
            return;
        }
        return;
    }
    /* release */
    if (c->fail != F_NONE) {
        if (is_closed(cl)) {
            op_finish(op, TK_E_CLOSED, 0, NULL);
            return;
        }
        if (c->fail == F_LOST) {
            op->maybe = 1;
            op->next_try = now + redirect_delay(++op->retries);
        }
        return;
    }
    switch (c->status) {
    case 'O': op_finish(op, TK_OK, 0, "ok"); return;
    case 'N':
        if (op->maybe)
            op_finish(op, TK_INDETERMINATE, 0, "the token no longer holds the key; an earlier unconfirmed attempt may have released it");
        else
            op_finish(op, TK_NOT_HOLDER, 0, NULL);
        return;
    case 'M':
        follow(cl, c->payload);
        if (++op->moves > MAX_MOVES) {
            op->moves = 0;
            op->next_try = now + redirect_delay(++op->retries);
        }
        return;
    case 'U':
        op->maybe = 1;
        op->next_try = now + redirect_delay(++op->retries);
        return;
    default: op_finish(op, TK_E_INVALID, c->code, c->payload[0] ? c->payload : NULL); return;
    }
}

/* One step of the state machine (op->mu held). */
static void op_step(tk_op *op) {
    tk_client *cl = op->cl;
    if (op->done) return;
    uint64_t now = tk_now_ns();
    if (op->completed && op->c) {
        call *c = op->c;
        op->c = NULL;
        op->completed = 0;
        op_answer(op, c, now);
        if (!c->embedded) call_free(c);
        if (op->done) return;
    }
    if (op->cancel_req && !op->c) {
        op_finish(op, TK_E_CANCELLED, 0, NULL);
        return;
    }
    if (op->c) {
        if (op->kind == K_RELEASE && now >= op->deadline && conn_drop(op->c)) {
            op->c = NULL; /* the I/O thread frees it */
            op_finish(op, TK_INDETERMINATE, 0, "release not confirmed within 5 s");
        } else if (op->kind == K_ACQUIRE && now >= op->answer_by && conn_abandon(op->c)) {
            /* the server answers T by the wait at the latest: a connection that is up
             * but silent (a stopped process, a black-holed path) must not hold the
             * caller forever; C withdraws it, a late G is released by the client */
            op->c = NULL;
            op_finish(op, TK_INDETERMINATE, 0, "no answer within the wait + the answer allowance (server unresponsive)");
        }
        return;
    }
    if (is_closed(cl)) {
        op_finish(op, TK_E_CLOSED, 0, NULL);
        return;
    }
    if (now < op->next_try) return;
    if (op->kind == K_ACQUIRE && op->wait > 0 && (op->ever_sent || now > op->start + MS)) {
        /* the wait bounds the whole call: time spent connecting or retrying counts */
        if (op->budget_end < now + MS) {
            if (op->ever_sent) {
                op_finish(op, TK_TIMEOUT, 0, NULL);
                return;
            }
            op->wait = 0; /* still connecting after the wait: one last try, never queued */
        } else {
            op->wait = (uint32_t)((op->budget_end - now) / MS);
        }
    }
    call *c = &op->inl;
    memcpy(c->key, op->key, op->klen);
    c->klen = op->klen;
    c->counts = 0;
    c->fail = F_NONE;
    c->token = 0;
    c->embedded = 1;
    c->hnext = NULL;
    c->owner = OWN_OP;
    c->opref = op;
    c->set = op->set;
    c->setlen = op->setlen;
    c->count = op->count;
    c->owns_set = 0;
    if (op->kind == K_ACQUIRE) {
        c->op = op->set ? 'S' : 'A';
        c->lease = op->lease;
        c->wait = op->wait;
        c->counts = op->wait > 0;
    } else {
        c->op = op->set ? 'X' : 'R';
        c->arg = op->token;
    }
    int r = try_enqueue(cl, c);
    if (r == ENQ_OK) {
        op->c = c;
        op->ever_sent = 1;
        /* R2: counted from the write (the frame is handed to the socket now) */
        if (op->kind == K_ACQUIRE) op->answer_by = now + (uint64_t)c->wait * MS + cl->allowance_ns;
        return;
    }
    if (r == ENQ_UNSUP) {
        op_finish(op, TK_E_UNSUPPORTED, 0, "key sets are not supported by this server (protocol 1.1, KEY_SETS)");
        return;
    }
    if (r == ENQ_DOWN && op->kind == K_ACQUIRE) {
        /* R4/R5: no connection and the last attempt failed authentication or
         * TLS: that will not change within the wait; fail now with the reason */
        pthread_mutex_lock(&cl->mu);
        tk_status hard = cl->last_err;
        uint8_t code = cl->last_code;
        char why[128];
        copy_msg(why, sizeof why, cl->last_msg);
        pthread_mutex_unlock(&cl->mu);
        if (hard == TK_E_AUTH || hard == TK_E_TLS) {
            op_finish(op, hard, code, why[0] ? why : NULL);
            return;
        }
    }
    uint64_t limit = op->kind == K_RELEASE ? op->deadline : op->budget_end;
    /* R1: the wait bounds the whole call, connecting included; a connection
     * being opened for the first time may be waited for up to 1 s past it */
    if (op->kind == K_ACQUIRE && r == ENQ_DOWN && limit < op->grace_end && now >= limit && first_connecting(cl))
        limit = op->grace_end;
    if (now >= limit) {
        if (op->kind == K_RELEASE)
            op_finish(op, op->maybe ? TK_INDETERMINATE : TK_E_CONNECT, 0, "release not confirmed within 5 s");
        else if (r == ENQ_FULL)
            op_finish(op, TK_TIMEOUT, 0, "no free max_inflight slot within the wait");
        else {
            pthread_mutex_lock(&cl->mu);
            uint8_t code = cl->last_code;
            pthread_mutex_unlock(&cl->mu);
            char why[128];
            pthread_mutex_lock(&cl->mu);
            copy_msg(why, sizeof why, cl->last_msg);
            pthread_mutex_unlock(&cl->mu);
            op_finish(op, connect_failure(cl), code, why[0] ? why : NULL);
        }
        return;
    }
    /* waiting for a free slot: every 5 ms; for a connection: blocking callers are
     * woken by bump_gen's futex and queues by its signal, so a queue only needs
     * a slow fallback poll */
    uint64_t nt = now + (r == ENQ_DOWN && op->async == A_QUEUE ? 250 : 5) * MS;
    op->next_try = nt < limit ? nt : limit;
}

/* ns until the op needs a step even without a completion; UINT64_MAX none. */
static uint64_t op_wait_ns(tk_op *op) {
    if (op->done) return 0;
    uint64_t now = tk_now_ns();
    if (op->completed) return 0;
    if (op->c) {
        uint64_t end = op->kind == K_RELEASE ? op->deadline : op->answer_by;
        return end > now ? end - now : 0;
    }
    return op->next_try > now ? op->next_try - now : 0;
}

static void fill_out(tk_op *op, tk_lease *out);

static void op_init(tk_op *op, tk_client *cl, int kind, const void *key, size_t klen) {
    memset(op, 0, offsetof(tk_op, inl));
    memset(&op->inl, 0, offsetof(call, payload));
    op->inl.payload[0] = 0;
    op->cl = cl;
    op->kind = kind;
    op->efd = -1;
    memcpy(op->key, key, klen);
    op->klen = klen;
}

/* An acquire's lease and its budgets from now: the wait bounds the whole call,
 * connecting included (R1; up to 1 s more while a first connection opens). */
static void acquire_budget(tk_op *op, uint32_t lease_ms, uint32_t wait_ms) {
    uint64_t now = tk_now_ns();
    op->lease = lease_ms;
    op->wait = wait_ms;
    op->start = now;
    op->budget_end = now + (uint64_t)wait_ms * MS;
    op->grace_end = now + 1000 * MS;
}

/* An op other threads may touch (tk_acquire_start): heap, mutex, condvar. */
static tk_op *op_new(tk_client *cl, int kind, const void *key, size_t klen) {
    tk_op *op = malloc(sizeof *op);
    if (!op) return NULL;
    op_init(op, cl, kind, key, klen);
    op->async = A_OP;
    pthread_mutex_init(&op->mu, NULL);
    cond_init_mono(&op->cv);
    return op;
}

/* Blocking ops (tk_acquire, tk_release*) live on the caller's stack and only
 * the caller touches them: no lock; the I/O thread hands the answer over
 * through op->cstate and wakes this caller only (futex). */
static tk_status op_wait_blocking(tk_op *op, tk_lease *out) {
    tk_client *cl = op->cl;
    for (;;) {
        if (__atomic_load_n(&op->cstate, __ATOMIC_ACQUIRE) == CS_DONE) {
            op->cstate = CS_IDLE;
            op->completed = 1;
            if (op->inl.token) { /* before any other work (a log callback, a retry) */
                op->inl.token = 0;
                conn_settle(op->inl.cn);
            }
        }
        op_step(op);
        if (op->done) break;
        if (op->completed) continue;
        uint64_t ns = op_wait_ns(op);
        if (ns == 0) continue;
        struct timespec rel, *rp = NULL;
        if (ns != UINT64_MAX) {
            rel.tv_sec = (time_t)(ns / 1000000000ull);
            rel.tv_nsec = (long)(ns % 1000000000ull);
            rp = &rel;
        }
        if (op->c) {
            /* Yield before sleeping: with many callers on few cores the answer
             * usually comes while others run, and a caller that never slept
             * costs the I/O thread no futex wake (on a VM a cross-CPU wake-up
             * and its switch cost ~6 us; 64 threads: 55 k -> ~105 k pairs/s,
             * docs/benchmarks.md). Bounded by count and time: alone on a core
             * each yield returns at once, so a lone caller spins about 10 us. */
            uint64_t spin_end = tk_now_ns() + SPIN_NS;
            for (int i = 0; i < SPIN_YIELDS && __atomic_load_n(&op->cstate, __ATOMIC_ACQUIRE) != CS_DONE; i++) {
                sched_yield();
                if ((i & 3) == 3 && tk_now_ns() > spin_end) break;
            }
            if (__atomic_load_n(&op->cstate, __ATOMIC_ACQUIRE) == CS_DONE) continue;
            int idle = CS_IDLE;
            if (__atomic_compare_exchange_n(&op->cstate, &idle, CS_SLEEP, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                futex_wait(&op->cstate, CS_SLEEP, rp);
                int sl = CS_SLEEP; /* timeout or a stray wake-up: back to idle unless the answer is in */
                __atomic_compare_exchange_n(&op->cstate, &sl, CS_IDLE, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
            }
        } else {
            /* waiting to retry: woken early when a connection comes up */
            int g = __atomic_load_n(&cl->gen, __ATOMIC_ACQUIRE);
            __atomic_add_fetch(&cl->gen_waiters, 1, __ATOMIC_ACQ_REL);
            if (!is_closed(cl)) futex_wait(&cl->gen, g, rp);
            __atomic_sub_fetch(&cl->gen_waiters, 1, __ATOMIC_ACQ_REL);
        }
    }
    fill_out(op, out);
    return op->result;
}

static void fill_out(tk_op *op, tk_lease *out) {
    if (op->result != TK_OK) copy_msg(g_errmsg, sizeof g_errmsg, op->msg);
    if (!out) return;
    if (op->result == TK_OK && op->kind == K_ACQUIRE) {
        *out = op->lease_out;
        return;
    }
    out->code = op->code;
    copy_msg(out->message, sizeof out->message, op->msg);
}

static tk_status refuse(tk_status st, tk_lease *out, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static tk_status refuse(tk_status st, tk_lease *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_errmsg, sizeof g_errmsg, fmt, ap);
    va_end(ap);
    if (out) {
        out->code = 0;
        copy_msg(out->message, sizeof out->message, g_errmsg);
    }
    return st;
}

/* R8: a key is refused before anything is sent, the message naming the
 * argument and its limit (the bytes of an invalid key are not echoed). */
static tk_status check_key(const char *op, const void *key, size_t klen, tk_lease *out) {
    if (klen == 0 || klen > TK_MAX_KEY || !key)
        return refuse(TK_E_INVALID, out, "%s: key must be 1..%d bytes (got %zu)", op, TK_MAX_KEY, key ? klen : 0);
    if (!tk_key_ok((const uint8_t *)key, klen))
        return refuse(TK_E_INVALID, out,
                      "%s: key must be 1..%d bytes of valid UTF-8 without control characters (got %zu bytes that are not)",
                      op, TK_MAX_KEY, klen);
    return TK_OK;
}

/* The checks every call that starts an op makes before anything is sent:
 * the client, the key, lease >= 1 (acquire) or token != 0 (release). */
static tk_status start_check(tk_client *cl, int kind, const void *key, size_t klen, uint32_t lease_ms, uint64_t token,
                             tk_lease *out) {
    const char *op = kind == K_ACQUIRE ? "acquire" : "release";
    if (!cl) return refuse(TK_E_INVALID, out, "%s: no client (NULL)", op);
    if (forked(cl)) return refuse(TK_E_FORKED, out, "%s: %s", op, tk_strerror(TK_E_FORKED));
    tk_status st = check_key(op, key, klen, out);
    if (st != TK_OK) return st;
    if (kind == K_ACQUIRE && lease_ms == 0)
        return refuse(TK_E_INVALID, out, "%s \"%.*s\": lease must be 1..4294967295 ms (got 0)", op, (int)klen, (const char *)key);
    if (kind == K_RELEASE && token == 0)
        return refuse(TK_E_INVALID, out, "%s \"%.*s\": token must be 1..18446744073709551615 (got 0, never issued)", op,
                      (int)klen, (const char *)key);
    if (is_closed(cl)) return refuse(TK_E_CLOSED, out, "%s \"%.*s\": client closed", op, (int)klen, (const char *)key);
    return TK_OK;
}

/* A key set's body from keys[] (R8 for every key, 2..16, distinct): heap, or NULL with the refusal. */
static uint8_t *set_body(int kind, const tk_key *keys, size_t n, size_t *blen, tk_status *st, tk_lease *out) {
    const char *op = kind == K_ACQUIRE ? "acquire_set" : "release_set";
    *st = TK_OK;
    if (!keys || n < TK_SET_MIN || n > TK_SET_MAX) {
        *st = refuse(TK_E_INVALID, out, "%s: a key set has 2..16 keys (got %zu)", op, keys ? n : 0);
        return NULL;
    }
    const uint8_t *ks[TK_SET_MAX];
    size_t ls[TK_SET_MAX];
    for (size_t i = 0; i < n; i++) {
        ks[i] = (const uint8_t *)keys[i].data;
        ls[i] = keys[i].len;
        char what[40];
        snprintf(what, sizeof what, "%s, keys[%zu]", op, i);
        if ((*st = check_key(what, keys[i].data, keys[i].len, out)) != TK_OK) return NULL;
    }
    uint8_t *b = malloc(TK_SET_BODY_MAX);
    if (!b) {
        *st = refuse(TK_E_NOMEM, out, "%s: out of memory", op);
        return NULL;
    }
    const char *why;
    size_t bad;
    *blen = tk_enc_set_body(b, ks, ls, n, &why, &bad);
    if (*blen == 0) {
        free(b);
        *st = refuse(TK_E_INVALID, out, "%s: keys[%zu] \"%.*s\" appears twice (2..16 distinct keys)", op, bad,
                     (int)ls[bad], (const char *)ks[bad]);
        return NULL;
    }
    return b;
}

/* Gives a started op its set (kind's checks done by the caller). */
static void op_take_set(tk_op *op, uint8_t *body, size_t blen, size_t n) {
    op->set = body;
    op->setlen = blen;
    op->count = (uint8_t)n;
}

static uint32_t min_rem(const tk_acquire_opts *o) {
    return o && (o->size == 0 || o->size >= offsetof(tk_acquire_opts, min_remaining_ms) + 4) ? o->min_remaining_ms : 0;
}

tk_status tk_acquire_start_ex(tk_client *cl, const void *key, size_t klen, uint32_t lease_ms, uint32_t wait_ms,
                              const tk_acquire_opts *opts, tk_op **op_out) {
    *op_out = NULL;
    tk_status st = start_check(cl, K_ACQUIRE, key, klen, lease_ms, 0, NULL);
    if (st != TK_OK) return st;
    tk_op *op = op_new(cl, K_ACQUIRE, key, klen);
    if (!op) return TK_E_NOMEM;
    op->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    op->min_remaining = min_rem(opts);
    acquire_budget(op, lease_ms, wait_ms);
    pthread_mutex_lock(&op->mu);
    op_step(op);
    pthread_mutex_unlock(&op->mu);
    *op_out = op;
    return TK_OK;
}

tk_status tk_acquire_start(tk_client *cl, const void *key, size_t klen, uint32_t lease_ms, uint32_t wait_ms,
                           tk_op **op_out) {
    return tk_acquire_start_ex(cl, key, klen, lease_ms, wait_ms, NULL, op_out);
}

tk_status tk_acquire_set_start(tk_client *cl, const tk_key *keys, size_t n, uint32_t lease_ms, uint32_t wait_ms,
                               tk_op **op_out) {
    *op_out = NULL;
    size_t blen = 0;
    tk_status st;
    uint8_t *body = set_body(K_ACQUIRE, keys, n, &blen, &st, NULL);
    if (!body) return st;
    if ((st = start_check(cl, K_ACQUIRE, keys[0].data, keys[0].len, lease_ms, 0, NULL)) != TK_OK) {
        free(body);
        return st;
    }
    tk_op *op = op_new(cl, K_ACQUIRE, keys[0].data, keys[0].len);
    if (!op) {
        free(body);
        return TK_E_NOMEM;
    }
    op_take_set(op, body, blen, n);
    op->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    acquire_budget(op, lease_ms, wait_ms);
    pthread_mutex_lock(&op->mu);
    op_step(op);
    pthread_mutex_unlock(&op->mu);
    *op_out = op;
    return TK_OK;
}


int tk_op_fd(tk_op *op) { return op->efd; }

int tk_op_timeout_ms(tk_op *op) {
    pthread_mutex_lock(&op->mu);
    uint64_t ns = op_wait_ns(op);
    pthread_mutex_unlock(&op->mu);
    if (ns == UINT64_MAX) return -1;
    return (int)((ns + MS - 1) / MS);
}

tk_status tk_op_drive(tk_op *op, tk_lease *out) {
    if (op->efd >= 0) drain_fd(op->efd);
    pthread_mutex_lock(&op->mu);
    op_step(op);
    tk_status st = op->done ? op->result : TK_PENDING;
    if (op->done) fill_out(op, out);
    pthread_mutex_unlock(&op->mu);
    return st;
}

tk_status tk_op_wait(tk_op *op, tk_lease *out) {
    pthread_mutex_lock(&op->mu);
    for (;;) {
        op_step(op);
        if (op->done) break;
        uint64_t ns = op_wait_ns(op);
        if (ns == 0) continue;
        if (op->completed) continue;
        if (ns == UINT64_MAX) {
            pthread_cond_wait(&op->cv, &op->mu);
        } else {
            struct timespec ts;
            abs_deadline(&ts, ns);
            pthread_cond_timedwait(&op->cv, &op->mu, &ts);
        }
    }
    fill_out(op, out);
    tk_status st = op->result;
    pthread_mutex_unlock(&op->mu);
    return st;
}

void tk_op_cancel(tk_op *op) {
    pthread_mutex_lock(&op->mu);
    if (!op->done) {
        op->cancel_req = 1;
        if (op->c && !op->completed && conn_abandon(op->c)) {
            op->c = NULL; /* the I/O thread owns it now and compensates a grant */
        }
        op_step(op);
    }
    pthread_cond_broadcast(&op->cv);
    pthread_mutex_unlock(&op->mu);
}

void tk_op_free(tk_op *op) {
    if (!op) return;
    tk_op_cancel(op);
    pthread_mutex_lock(&op->mu);
    while (op->c) { /* answered, the completion is on its way: wait for it */
        if (op->completed) {
            op_step(op);
            break;
        }
        pthread_cond_wait(&op->cv, &op->mu);
    }
    pthread_mutex_unlock(&op->mu);
    if (op->efd >= 0) close(op->efd);
    pthread_mutex_destroy(&op->mu);
    pthread_cond_destroy(&op->cv);
    free(op->set);
    free(op);
}

/* ---------------------------------------------------------------- queue */

/* The I/O thread hands an answered op to its queue; one eventfd write per
 * burst (while the queue's thread has not drained the previous one). */
static void queue_signal_locked(tk_queue *q) {
    if (!q->signalled) {
        q->signalled = 1;
        wake_fd(q->efd);
    }
}

static void queue_push(tk_queue *q, tk_op *op) {
    pthread_mutex_lock(&q->mu);
    op->qnext = NULL;
    *q->ready_tail = op;
    q->ready_tail = &op->qnext;
    queue_signal_locked(q);
    pthread_mutex_unlock(&q->mu);
}

static void queue_signal(tk_queue *q) {
    pthread_mutex_lock(&q->mu);
    queue_signal_locked(q);
    pthread_mutex_unlock(&q->mu);
}

static void queue_unlink_live(tk_queue *q, tk_op *op) {
    if (op->lprev) op->lprev->lnext = op->lnext;
    else q->live = op->lnext;
    if (op->lnext) op->lnext->lprev = op->lprev;
    op->lprev = op->lnext = NULL;
}

/* After a step: a finished op moves from the live list to the done list;
 * an unfinished one brings the next timer forward when it needs one. */
static void queue_settle(tk_queue *q, tk_op *op, uint64_t now) {
    if (op->done) {
        queue_unlink_live(q, op);
        op->qnext = NULL;
        *q->done_tail = op;
        q->done_tail = &op->qnext;
        return;
    }
    uint64_t ns = op_wait_ns(op);
    if (ns != UINT64_MAX && now + ns < q->next_timer) q->next_timer = now + ns;
}

tk_queue *tk_queue_new(tk_client *cl) {
    if (!cl) {
        errno = EINVAL;
        return NULL;
    }
    tk_queue *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (q->efd < 0) {
        free(q);
        return NULL;
    }
    q->cl = cl;
    pthread_mutex_init(&q->mu, NULL);
    q->ready_tail = &q->ready;
    q->done_tail = &q->done;
    q->next_timer = UINT64_MAX;
    pthread_mutex_lock(&cl->qmu);
    q->cl_next = cl->queues;
    cl->queues = q;
    pthread_mutex_unlock(&cl->qmu);
    return q;
}

int tk_queue_fd(tk_queue *q) { return q ? q->efd : -1; }

static tk_op *queue_op(tk_queue *q, int kind, const void *key, size_t klen, void *user) {
    tk_op *op = q->spare;
    if (op) {
        q->spare = op->lnext;
        q->nspare--;
    } else if (!(op = malloc(sizeof *op))) {
        return NULL;
    }
    op_init(op, q->cl, kind, key, klen);
    q->pending++;
    op->async = A_QUEUE;
    op->q = q;
    op->user = user;
    op->lnext = q->live;
    if (q->live) q->live->lprev = op;
    q->live = op;
    return op;
}

/* Steps op outside tk_queue_poll (a start, a cancel): an op that finished
 * at once (closed client, cancel) makes the fd readable, poll returns it. */
static void queue_step(tk_queue *q, tk_op *op) {
    uint64_t now = tk_now_ns();
    op_step(op);
    queue_settle(q, op, now);
    if (op->done) queue_signal(q);
}

tk_status tk_queue_acquire_ex(tk_queue *q, const void *key, size_t klen, uint32_t lease_ms, uint32_t wait_ms,
                              const tk_acquire_opts *opts, void *user, tk_op **op_out) {
    if (op_out) *op_out = NULL;
    tk_status st = start_check(q ? q->cl : NULL, K_ACQUIRE, key, klen, lease_ms, 0, NULL);
    if (st != TK_OK) return st;
    tk_op *op = queue_op(q, K_ACQUIRE, key, klen, user);
    if (!op) return TK_E_NOMEM;
    op->min_remaining = min_rem(opts);
    acquire_budget(op, lease_ms, wait_ms);
    if (op_out) *op_out = op;
    queue_step(q, op);
    return TK_OK;
}

tk_status tk_queue_acquire(tk_queue *q, const void *key, size_t klen, uint32_t lease_ms, uint32_t wait_ms,
                           void *user, tk_op **op_out) {
    return tk_queue_acquire_ex(q, key, klen, lease_ms, wait_ms, NULL, user, op_out);
}

static tk_status queue_set(tk_queue *q, int kind, const tk_key *keys, size_t n, uint32_t lease_ms, uint32_t wait_ms,
                           uint64_t token, void *user, tk_op **op_out) {
    if (op_out) *op_out = NULL;
    size_t blen = 0;
    tk_status st;
    uint8_t *body = set_body(kind, keys, n, &blen, &st, NULL);
    if (!body) return st;
    if ((st = start_check(q ? q->cl : NULL, kind, keys[0].data, keys[0].len, lease_ms, token, NULL)) != TK_OK) {
        free(body);
        return st;
    }
    tk_op *op = queue_op(q, kind, keys[0].data, keys[0].len, user);
    if (!op) {
        free(body);
        return TK_E_NOMEM;
    }
    op_take_set(op, body, blen, n);
    if (kind == K_ACQUIRE) {
        acquire_budget(op, lease_ms, wait_ms);
        if (op_out) *op_out = op;
    } else {
        op->token = token;
        op->deadline = tk_now_ns() + REL_WINDOW_NS;
    }
    queue_step(q, op);
    return TK_OK;
}

tk_status tk_queue_acquire_set(tk_queue *q, const tk_key *keys, size_t n, uint32_t lease_ms, uint32_t wait_ms,
                               void *user, tk_op **op_out) {
    return queue_set(q, K_ACQUIRE, keys, n, lease_ms, wait_ms, 0, user, op_out);
}

tk_status tk_queue_release_set(tk_queue *q, const tk_key *keys, size_t n, uint64_t token, void *user) {
    return queue_set(q, K_RELEASE, keys, n, 1, 0, token, user, NULL);
}

tk_status tk_queue_release(tk_queue *q, const tk_lease *l, void *user) {
    if (!q || !l) return TK_E_INVALID;
    return tk_queue_release_token(q, l->key, l->key_len, l->token, user);
}

tk_status tk_queue_release_token(tk_queue *q, const void *key, size_t klen, uint64_t token, void *user) {
    tk_status st = start_check(q ? q->cl : NULL, K_RELEASE, key, klen, 1, token, NULL);
    if (st != TK_OK) return st;
    tk_op *op = queue_op(q, K_RELEASE, key, klen, user);
    if (!op) return TK_E_NOMEM;
    op->token = token;
    op->deadline = tk_now_ns() + REL_WINDOW_NS;
    queue_step(q, op);
    return TK_OK;
}

void tk_queue_cancel(tk_queue *q, tk_op *op) {
    if (!q || !op || op->q != q || op->done || op->kind != K_ACQUIRE || forked(q->cl)) return;
    op->cancel_req = 1;
    if (op->c && !op->completed && conn_abandon(op->c)) {
        op->c = NULL; /* the I/O thread owns it now and compensates a grant */
    }
    queue_step(q, op); /* finishes now unless the answer is on its way (then at its arrival) */
}

/* Steps every op the I/O threads answered, and every op whose timer came. */
static void queue_drive(tk_queue *q) {
    pthread_mutex_lock(&q->mu);
    if (q->signalled) { /* drained under the lock: a push after it writes again */
        drain_fd(q->efd);
        q->signalled = 0;
    }
    tk_op *r = q->ready;
    q->ready = NULL;
    q->ready_tail = &q->ready;
    pthread_mutex_unlock(&q->mu);
    uint64_t now = tk_now_ns();
    while (r) {
        tk_op *n = r->qnext;
        r->completed = 1;
        op_step(r);
        queue_settle(q, r, now);
        r = n;
    }
    if (now < q->next_timer && !__atomic_exchange_n(&q->retry, 0, __ATOMIC_ACQ_REL)) return;
    q->next_timer = UINT64_MAX;
    for (tk_op *op = q->live, *n; op; op = n) {
        n = op->lnext;
        if (op_wait_ns(op) == 0) op_step(op);
        queue_settle(q, op, now);
    }
}

size_t tk_queue_poll(tk_queue *q, tk_event *ev, size_t n) {
    if (!q || (!ev && n) || forked(q->cl)) return 0; /* a child after fork() never drives the parent's ops */
    queue_drive(q);
    size_t k = 0;
    while (k < n && q->done) {
        tk_op *op = q->done;
        q->done = op->qnext;
        if (!q->done) q->done_tail = &q->done;
        tk_event *e = &ev[k++];
        q->pending--;
        e->user = op->user;
        e->op = op;
        e->kind = op->kind == K_ACQUIRE ? TK_EV_ACQUIRE : TK_EV_RELEASE;
        e->status = op->result;
        fill_out(op, &e->lease);
        if (!(op->result == TK_OK && op->kind == K_ACQUIRE)) {
            memcpy(e->lease.key, op->key, op->klen);
            e->lease.key_len = op->klen;
            e->lease.token = op->kind == K_RELEASE ? op->token : 0;
            e->lease.deadline_ns = 0;
        }
        free(op->set);
        op->set = NULL;
        if (q->nspare < 256) {
            op->lnext = q->spare;
            q->spare = op;
            q->nspare++;
        } else {
            free(op);
        }
    }
    if (q->done) queue_signal(q); /* more than n: the fd stays readable */
    return k;
}

int tk_queue_timeout_ms(tk_queue *q) {
    if (!q) return -1;
    if (q->done) return 0;
    if (!q->live || q->next_timer == UINT64_MAX) return -1;
    uint64_t now = tk_now_ns();
    if (q->next_timer <= now) return 0;
    uint64_t ms = (q->next_timer - now + MS - 1) / MS;
    return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

size_t tk_queue_pending(tk_queue *q) { return q ? q->pending : 0; }

/* unlink: 0 in a child after fork(), where no I/O thread runs bump_gen and
 * cl->qmu may have been copied locked */
static void queue_release_memory(tk_queue *q, int unlink) {
    if (unlink) {
        pthread_mutex_lock(&q->cl->qmu);
        for (tk_queue **pp = &q->cl->queues; *pp; pp = &(*pp)->cl_next)
            if (*pp == q) {
                *pp = q->cl_next;
                break;
            }
        pthread_mutex_unlock(&q->cl->qmu);
    }
    for (tk_op *op = q->live, *n; op; op = n) {
        n = op->lnext;
        free(op->set);
        free(op);
    }
    while (q->done) {
        tk_op *op = q->done;
        q->done = op->qnext;
        free(op->set);
        free(op);
    }
    while (q->spare) {
        tk_op *op = q->spare;
        q->spare = op->lnext;
        free(op);
    }
    close(q->efd);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

void tk_queue_free(tk_queue *q) {
    if (!q) return;
    if (forked(q->cl)) { /* a child after fork(): no I/O thread answers here, no inherited socket is touched */
        queue_release_memory(q, 0);
        return;
    }
    /* unfinished acquires are withdrawn (a grant that won the race is released) */
    for (tk_op *op = q->live, *n; op; op = n) {
        n = op->lnext;
        if (op->kind == K_ACQUIRE) tk_queue_cancel(q, op);
    }
    /* a release with no attempt in flight goes to the client's background
     * releaser (5 s window); answers on their way (releases in flight,
     * acquires answered before the cancel) come to the ready list: wait */
    for (;;) {
        for (tk_op *op = q->live, *n; op; op = n) {
            n = op->lnext;
            if (op->c) continue;
            if (op->kind == K_RELEASE && !is_closed(q->cl))
                compensate_set(q->cl, op->key, op->klen, op->set, op->setlen, op->count, op->token);
            op_finish(op, TK_E_CANCELLED, 0, NULL);
            queue_settle(q, op, 0);
        }
        if (!q->live) break;
        struct pollfd p = {q->efd, POLLIN, 0};
        poll(&p, 1, 100);
        queue_drive(q);
    }
    /* grants finished but never returned by tk_queue_poll: nobody holds them */
    for (tk_op *op = q->done; op; op = op->qnext)
        if (op->kind == K_ACQUIRE && op->result == TK_OK && !is_closed(q->cl))
            compensate_set(q->cl, op->key, op->klen, op->set, op->setlen, op->count, op->lease_out.token);
    queue_release_memory(q, 1);
}

tk_status tk_acquire_ex(tk_client *cl, const void *key, size_t klen, uint32_t lease_ms, uint32_t wait_ms,
                        const tk_acquire_opts *opts, tk_lease *out) {
    /* a grant nobody can see could never be released */
    if (!out) return refuse(TK_E_INVALID, NULL, "acquire: out must not be NULL (the lease is the only way to release)");
    tk_status st = start_check(cl, K_ACQUIRE, key, klen, lease_ms, 0, out);
    if (st != TK_OK) return st;
    tk_op op;
    op_init(&op, cl, K_ACQUIRE, key, klen);
    op.min_remaining = min_rem(opts);
    acquire_budget(&op, lease_ms, wait_ms);
    return op_wait_blocking(&op, out);
}

tk_status tk_acquire(tk_client *cl, const void *key, size_t klen, uint32_t lease_ms, uint32_t wait_ms,
                     tk_lease *out) {
    return tk_acquire_ex(cl, key, klen, lease_ms, wait_ms, NULL, out);
}

tk_status tk_acquire_set(tk_client *cl, const tk_key *keys, size_t n, uint32_t lease_ms, uint32_t wait_ms,
                         tk_lease *out) {
    if (!out) return refuse(TK_E_INVALID, NULL, "acquire_set: out must not be NULL (the lease is the only way to release)");
    size_t blen = 0;
    tk_status st;
    uint8_t *body = set_body(K_ACQUIRE, keys, n, &blen, &st, out);
    if (!body) return st;
    if ((st = start_check(cl, K_ACQUIRE, keys[0].data, keys[0].len, lease_ms, 0, out)) != TK_OK) {
        free(body);
        return st;
    }
    tk_op op;
    op_init(&op, cl, K_ACQUIRE, keys[0].data, keys[0].len);
    op_take_set(&op, body, blen, n);
    acquire_budget(&op, lease_ms, wait_ms);
    st = op_wait_blocking(&op, out);
    free(body);
    return st;
}

static tk_status release_until(tk_client *cl, const void *key, size_t klen, const uint8_t *set, size_t setlen,
                               uint8_t count, uint64_t token, uint64_t deadline, uint8_t *code) {
    tk_op op;
    op_init(&op, cl, K_RELEASE, key, klen);
    op.set = (uint8_t *)set; /* the caller's: freed by the caller */
    op.setlen = setlen;
    op.count = count;
    op.token = token;
    op.deadline = deadline;
    tk_lease tmp;
    tk_status st = op_wait_blocking(&op, &tmp);
    if (code) *code = st == TK_OK ? 0 : tmp.code;
    return st;
}

tk_status tk_release_token(tk_client *cl, const void *key, size_t klen, uint64_t token, uint8_t *code) {
    if (code) *code = 0;
    tk_status st = start_check(cl, K_RELEASE, key, klen, 1, token, NULL); /* R8: token 0 is never issued */
    if (st != TK_OK) return st;
    return release_until(cl, key, klen, NULL, 0, 0, token, tk_now_ns() + REL_WINDOW_NS, code);
}

tk_status tk_release(tk_client *cl, const tk_lease *l) {
    if (!l) return refuse(TK_E_INVALID, NULL, "release: no lease (NULL)");
    return tk_release_token(cl, l->key, l->key_len, l->token, NULL);
}

tk_status tk_release_lease(tk_client *cl, tk_lease *l, int *already) {
    if (already) *already = 0;
    if (!l) return refuse(TK_E_INVALID, NULL, "release: no lease (NULL)");
    if (__atomic_load_n(&l->released, __ATOMIC_ACQUIRE)) { /* R6: the second release of one lease is a no-op */
        if (already) *already = 1;
        return TK_OK;
    }
    tk_status st = tk_release_token(cl, l->key, l->key_len, l->token, NULL);
    /* answered: the lease is over (O, or N: expired / released by its token elsewhere) */
    if (st == TK_OK || st == TK_NOT_HOLDER) __atomic_store_n(&l->released, 1, __ATOMIC_RELEASE);
    return st;
}

int tk_lease_ending_fd(const tk_lease *l, uint32_t margin_ms) {
    if (!l) {
        errno = EINVAL;
        return -1;
    }
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (fd < 0) return -1;
    uint64_t at = l->deadline_ns > (uint64_t)margin_ms * MS ? l->deadline_ns - (uint64_t)margin_ms * MS : 0;
    uint64_t now = tk_now_ns();
    if (__atomic_load_n(&l->released, __ATOMIC_ACQUIRE) || at <= now) at = now; /* ended: readable at once */
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    its.it_value.tv_sec = (time_t)(at / 1000000000ull);
    its.it_value.tv_nsec = (long)(at % 1000000000ull);
    if (timerfd_settime(fd, TFD_TIMER_ABSTIME, &its, NULL) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

tk_status tk_release_set(tk_client *cl, const tk_key *keys, size_t n, uint64_t token, uint8_t *code) {
    if (code) *code = 0;
    size_t blen = 0;
    tk_status st;
    uint8_t *body = set_body(K_RELEASE, keys, n, &blen, &st, NULL);
    if (!body) return st;
    if ((st = start_check(cl, K_RELEASE, keys[0].data, keys[0].len, 1, token, NULL)) == TK_OK)
        st = release_until(cl, keys[0].data, keys[0].len, body, blen, (uint8_t)n, token, tk_now_ns() + REL_WINDOW_NS,
                           code);
    free(body);
    return st;
}

/* -------------------------------------------------------------- releaser */

static void compensate_set(tk_client *cl, const uint8_t *key, size_t klen, const uint8_t *set, size_t setlen,
                           uint8_t count, uint64_t token) {
    uint8_t *copy = NULL;
    if (set && !(copy = malloc(setlen))) {
        logf_(cl, 2, "ticketing: out of memory; an abandoned set grant stays held until its lease ends");
        return;
    }
    if (set) memcpy(copy, set, setlen);
    pthread_mutex_lock(&cl->rmu);
    if (cl->jcount >= REL_QUEUE || cl->closed) {
        pthread_mutex_unlock(&cl->rmu);
        free(copy);
        logf_(cl, 2, "ticketing: release queue full; an abandoned grant stays held until its lease ends");
        return;
    }
    rel_job *j = &cl->jobs[(cl->jhead + cl->jcount) % REL_QUEUE];
    memcpy(j->key, key, klen);
    j->klen = klen;
    j->set = copy;
    j->setlen = setlen;
    j->count = count;
    j->token = token;
    j->deadline = tk_now_ns() + REL_WINDOW_NS;
    cl->jcount++;
    pthread_cond_signal(&cl->rcv);
    pthread_mutex_unlock(&cl->rmu);
}

static void *releaser_main(void *arg) {
    tk_client *cl = arg;
    pthread_mutex_lock(&cl->rmu);
    for (;;) {
        while (!cl->jcount && !is_closed(cl)) pthread_cond_wait(&cl->rcv, &cl->rmu);
        if (is_closed(cl)) break;
        rel_job j = cl->jobs[cl->jhead];
        cl->jobs[cl->jhead].set = NULL;
        cl->jhead = (cl->jhead + 1) % REL_QUEUE;
        cl->jcount--;
        pthread_mutex_unlock(&cl->rmu);
        tk_status st = release_until(cl, j.key, j.klen, j.set, j.setlen, j.count, j.token, j.deadline, NULL);
        free(j.set);
        if (st != TK_OK) logf_(cl, 2, "ticketing: background release failed: %s", tk_strerror(st));
        pthread_mutex_lock(&cl->rmu);
    }
    pthread_mutex_unlock(&cl->rmu);
    return NULL;
}


/* ---------------------------------------------------------------- client */

static __thread char g_new_error[256]; /* tk_client_new_error() */

const char *tk_client_new_error(void) { return g_new_error; }

const char *tk_version(void) { return TK_VERSION; }

unsigned tk_version_number(void) { return TK_VERSION_NUMBER; }

static void *new_failed(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void *new_failed(int err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_new_error, sizeof g_new_error, fmt, ap);
    va_end(ap);
    errno = err;
    return NULL;
}

/* Names the file a TLS setting could not load, and OpenSSL's reason. */
static int tls_file_error(const char *what, const char *file) {
    unsigned long e = ERR_peek_last_error();
    const char *why = NULL;
    FILE *f = fopen(file, "r");
    if (!f)
        why = strerror(errno);
    else
        fclose(f);
    if (!why) why = e ? ERR_reason_error_string(e) : "not a usable PEM file";
    snprintf(g_new_error, sizeof g_new_error, "tls.%s \"%.180s\": %s", what, file, why ? why : "unreadable");
    ERR_clear_error();
    return 0;
}

static SSL_CTX *make_ctx(const tk_tls_config *t) {
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) return new_failed(ENOMEM, "cannot create the TLS context");
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    int ok = 1;
    if (t->ca_file) {
        if (SSL_CTX_load_verify_locations(ctx, t->ca_file, NULL) != 1) ok = tls_file_error("ca_file", t->ca_file);
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        ok = 0;
        snprintf(g_new_error, sizeof g_new_error, "tls: the system's default CA paths cannot be loaded");
    }
    if (ok && t->cert_file && SSL_CTX_use_certificate_chain_file(ctx, t->cert_file) != 1)
        ok = tls_file_error("cert_file", t->cert_file);
    const char *kf = t->key_file ? t->key_file : t->cert_file;
    if (ok && t->cert_file && SSL_CTX_use_PrivateKey_file(ctx, kf, SSL_FILETYPE_PEM) != 1)
        ok = tls_file_error("key_file", kf);
    if (!ok) {
        SSL_CTX_free(ctx);
        errno = EINVAL;
        return NULL;
    }
    return ctx;
}

/* Whether a caller's struct of `size` bytes (0: this header's layout) holds the field ending at end. */
#define HAS_FIELD(size, type, field) ((size) == 0 || (size) >= offsetof(type, field) + sizeof(((type *)0)->field))

/* §12.3: the user's label, or "[<app> ]<host>/<pid> c/<version>"; cut to 64
 * bytes at a character boundary; none when invalid or "". */
static void make_label(tk_client *cl, const char *label, const char *app) {
    char buf[512];
    if (label) {
        snprintf(buf, sizeof buf, "%s", label);
    } else {
        char host[256];
        if (gethostname(host, sizeof host) != 0 || !host[0]) snprintf(host, sizeof host, "unknown");
        host[sizeof host - 1] = 0;
        snprintf(buf, sizeof buf, "%s%s%.200s/%ld c/%s", app && *app ? app : "", app && *app ? " " : "", host,
                 (long)getpid(), TK_VERSION);
    }
    size_t n = tk_label_cut((const uint8_t *)buf, strlen(buf));
    memcpy(cl->label, buf, n);
    cl->label_len = n;
}

tk_client *tk_client_new(const tk_config *cfg) {
    g_new_error[0] = 0;
    if (!cfg) return new_failed(EINVAL, "no configuration");
    if (!cfg->addrs || cfg->n_addrs == 0 || cfg->n_addrs > MAX_CONNS / 2)
        return new_failed(EINVAL, "addrs: 1..%d addresses required", MAX_CONNS / 2);
    for (size_t i = 0; i < cfg->n_addrs; i++) {
        char h[256], p[16];
        if (!cfg->addrs[i] || split_addr(cfg->addrs[i], h, sizeof h, p, sizeof p) != 0)
            return new_failed(EINVAL, "addrs[%zu]: not host:port", i);
    }
    if (cfg->token && strlen(cfg->token) > sizeof(((tk_client *)0)->token))
        return new_failed(EINVAL, "token: longer than %zu bytes", sizeof(((tk_client *)0)->token));
    tk_client *cl = calloc(1, sizeof *cl);
    if (!cl) return new_failed(ENOMEM, "out of memory");
    cl->jobs = calloc(REL_QUEUE, sizeof *cl->jobs);
    if (!cl->jobs) {
        free(cl);
        return new_failed(ENOMEM, "out of memory");
    }
    uint32_t allowance = HAS_FIELD(cfg->size, tk_config, answer_allowance_ms) ? cfg->answer_allowance_ms : 0;
    cl->allowance_ns = (uint64_t)(allowance ? allowance : ANSWER_ALLOWANCE_MS) * MS;
    pthread_once(&g_fork_once, fork_init);
    cl->fork_gen = __atomic_load_n(&g_fork_gen, __ATOMIC_RELAXED);
    if (cfg->token) {
        cl->tlen = strlen(cfg->token);
        memcpy(cl->token, cfg->token, cl->tlen);
    }
    cl->connect_timeout_ms = cfg->connect_timeout_ms ? cfg->connect_timeout_ms : 5000;
    make_label(cl, HAS_FIELD(cfg->size, tk_config, label) ? cfg->label : NULL,
               HAS_FIELD(cfg->size, tk_config, app_name) ? cfg->app_name : NULL);
    cl->log = cfg->log;
    cl->log_ud = cfg->log_ud;
    cl->leader = -1;
    cl->last_err = TK_E_CONNECT;
    if (cfg->tls) {
        cl->ssl_ctx = make_ctx(cfg->tls);
        if (!cl->ssl_ctx) {
            int err = errno;
            logf_(cl, 3, "ticketing: %s", g_new_error);
            free(cl->jobs);
            free(cl);
            errno = err;
            return NULL;
        }
        if (cfg->tls->server_name) snprintf(cl->server_name, sizeof cl->server_name, "%s", cfg->tls->server_name);
    }
    pthread_mutex_init(&cl->mu, NULL);
    pthread_mutex_init(&cl->qmu, NULL);
    cond_init_mono(&cl->cv);
    pthread_mutex_init(&cl->rmu, NULL);
    pthread_cond_init(&cl->rcv, NULL);
    pthread_create(&cl->rel_th, NULL, releaser_main, cl);
    pthread_mutex_lock(&cl->mu);
    int per = cfg->n_addrs == 1 ? 2 : 1;
    for (size_t i = 0; i < cfg->n_addrs; i++) {
        int dup = 0;
        for (int j = 0; j < cl->neps; j++) dup |= strcmp(cl->eps[j].addr, cfg->addrs[i]) == 0;
        if (!dup) add_endpoint(cl, cfg->addrs[i], per);
    }
    pthread_mutex_unlock(&cl->mu);
    return cl;
}

/* The reason of a failed wait for a connection, for tk_errmsg() (cl->mu held). */
static tk_status connect_failed(tk_client *cl, tk_status st) {
    snprintf(g_errmsg, sizeof g_errmsg, "connect: %s", cl->last_msg[0] ? cl->last_msg : tk_strerror(st));
    return st;
}

tk_status tk_client_wait_connected(tk_client *cl, uint32_t timeout_ms) {
    if (forked(cl)) return TK_E_FORKED;
    struct timespec ts;
    abs_deadline(&ts, (uint64_t)(timeout_ms ? timeout_ms : cl->connect_timeout_ms) * MS);
    pthread_mutex_lock(&cl->mu);
    for (;;) {
        if (cl->closed) {
            pthread_mutex_unlock(&cl->mu);
            return TK_E_CLOSED;
        }
        int all_failed = 1, up = 0;
        for (int i = 0; i < cl->nconns; i++) {
            conn *cn = cl->conns[i];
            pthread_mutex_lock(&cn->mu);
            up |= cn->up;
            all_failed &= cn->failures > 0;
            pthread_mutex_unlock(&cn->mu);
        }
        if (up) {
            pthread_mutex_unlock(&cl->mu);
            return TK_OK;
        }
        if (all_failed && (cl->last_err == TK_E_AUTH || cl->last_err == TK_E_TLS)) {
            tk_status st = connect_failed(cl, cl->last_err);
            pthread_mutex_unlock(&cl->mu);
            return st;
        }
        if (pthread_cond_timedwait(&cl->cv, &cl->mu, &ts) == ETIMEDOUT) {
            tk_status st = connect_failed(cl, cl->last_err == TK_E_TLS || cl->last_err == TK_E_AUTH ? cl->last_err : TK_E_CONNECT);
            pthread_mutex_unlock(&cl->mu);
            return st;
        }
    }
}

tk_status tk_client_last_error(tk_client *cl, uint8_t *code) {
    pthread_mutex_lock(&cl->mu);
    tk_status st = cl->last_err;
    if (code) *code = cl->last_code;
    pthread_mutex_unlock(&cl->mu);
    return st;
}

void tk_client_close(tk_client *cl) {
    if (!cl || forked(cl)) return;
    pthread_mutex_lock(&cl->mu);
    if (cl->closed) {
        pthread_mutex_unlock(&cl->mu);
        return;
    }
    __atomic_store_n(&cl->closed, 1, __ATOMIC_RELEASE);
    bump_gen(cl);
    pthread_cond_broadcast(&cl->cv);
    int n = cl->nconns;
    pthread_mutex_unlock(&cl->mu);
    pthread_mutex_lock(&cl->rmu);
    pthread_cond_broadcast(&cl->rcv);
    pthread_mutex_unlock(&cl->rmu);
    for (int i = 0; i < n; i++) wake_fd(cl->conns[i]->efd);
    for (int i = 0; i < n; i++)
        if (cl->conns[i]->started) pthread_join(cl->conns[i]->th, NULL);
    pthread_join(cl->rel_th, NULL);
}

void tk_client_free(tk_client *cl) {
    if (!cl) return;
    if (forked(cl)) {
        /* The threads do not exist in the child and the mutexes may be held:
         * leave the inherited state alone (the sockets belong to the parent). */
        return;
    }
    tk_client_close(cl);
    for (int i = 0; i < cl->nconns; i++) {
        conn *cn = cl->conns[i];
        close(cn->efd);
        free(cn->wbuf);
        free(cn->obuf);
        pthread_mutex_destroy(&cn->mu);
        pthread_cond_destroy(&cn->wcv);
        free(cn);
    }
    if (cl->ssl_ctx) SSL_CTX_free(cl->ssl_ctx);
    OPENSSL_cleanse(cl->token, sizeof cl->token);
    for (size_t i = 0; i < cl->jcount; i++) free(cl->jobs[(cl->jhead + i) % REL_QUEUE].set);
    free(cl->jobs);
    pthread_mutex_destroy(&cl->mu);
    pthread_mutex_destroy(&cl->qmu);
    pthread_cond_destroy(&cl->cv);
    pthread_mutex_destroy(&cl->rmu);
    pthread_cond_destroy(&cl->rcv);
    free(cl);
}
