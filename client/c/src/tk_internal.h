/* libticketing internals shared by the source files (never installed):
 * the structures, the constants, and the functions one file calls in another
 * (prefixed tki_, hidden from the shared library by -fvisibility=hidden).
 *
 *   util.c    clock, jitter, futex, fork detection, status texts
 *   net.c     socket I/O (plain or TLS), dial, TLS, handshake + feature ping + label
 *   conn.c    a connection: pipeline (req_id table, write buffer, writer role),
 *             response dispatch, the I/O thread, endpoints and the picker
 *   op.c      the acquire/release state machine, messages (R15), argument checks (R8), tk_op_*
 *   lock.c    the blocking lock API (tk_acquire*, tk_release*, key sets) and the releaser
 *   queue.c   the completion queue (tk_queue_*)
 *   client.c  tk_client_new / wait_connected / close / free, TLS context, label
 */
#ifndef TK_INTERNAL_H
#define TK_INTERNAL_H
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
enum { CS_IDLE, CS_SLEEP, CS_DONE };
enum { W_NONE, W_CALLER, W_IO };
enum { ENQ_OK, ENQ_DOWN, ENQ_FULL, ENQ_UNSUP };
#define MAX_CALLER_ROUNDS 4
#define DISPATCH_BATCH 128
#define HAS_FIELD(size, type, field) ((size) == 0 || (size) >= offsetof(type, field) + sizeof(((type *)0)->field))

extern unsigned tki_fork_gen;
extern __thread char tki_errmsg[640]; /* tk_errmsg() */
static inline int is_closed(tk_client *cl) { return __atomic_load_n(&cl->closed, __ATOMIC_ACQUIRE); }
static inline int forked(tk_client *cl) { return cl->fork_gen != __atomic_load_n(&tki_fork_gen, __ATOMIC_RELAXED); }

/* conn.c */
int tki_add_endpoint(tk_client *cl, const char *addr, int n);
void tki_call_free(call *c);
int tki_conn_abandon(call *c);
int tki_conn_drop(call *c);
void tki_conn_settle(conn *cn);
void tki_drain_fd(int fd);
int tki_first_connecting(tk_client *cl);
void tki_follow(tk_client *cl, const char *addr);
int tki_split_addr(const char *a, char *host, size_t hl, char *port, size_t pl);
int tki_try_enqueue(tk_client *cl, call *c);
void tki_wake_fd(int fd);

/* lock.c */
void *tki_releaser_main(void *arg); /* the background releaser thread */
void tki_compensate_set(tk_client *cl, const uint8_t *key, size_t klen, const uint8_t *set, size_t setlen, uint8_t count, uint64_t token);

/* net.c */
void tki_close_sock(conn *cn);
tk_status tki_conn_connect(conn *cn, uint32_t *max_inflight, uint8_t *rej_code);
ssize_t tki_io_read(conn *cn, void *b, size_t n, int *want_write);
ssize_t tki_io_write(conn *cn, const void *b, size_t n);

/* op.c */
void tki_acquire_budget(tk_op *op, uint32_t lease_ms, uint32_t wait_ms);
void tki_complete(tk_client *cl, call *c);
void tki_fill_out(tk_op *op, tk_lease *out);
uint32_t tki_min_rem(const tk_acquire_opts *o);
void tki_op_finish(tk_op *op, tk_status st, uint8_t code, const char *msg);
void tki_op_init(tk_op *op, tk_client *cl, int kind, const void *key, size_t klen);
void tki_op_step(tk_op *op);
void tki_op_take_set(tk_op *op, uint8_t *body, size_t blen, size_t n);
tk_status tki_op_wait_blocking(tk_op *op, tk_lease *out);
uint64_t tki_op_wait_ns(tk_op *op);
tk_status tki_refuse(tk_status st, tk_lease *out, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
uint8_t *tki_set_body(int kind, const tk_key *keys, size_t n, size_t *blen, tk_status *st, tk_lease *out);
tk_status tki_start_check(tk_client *cl, int kind, const void *key, size_t klen, uint32_t lease_ms, uint64_t token, tk_lease *out);

/* queue.c */
void tki_queue_push(tk_queue *q, tk_op *op);
void tki_queue_signal(tk_queue *q);

/* util.c */
void tki_abs_deadline(struct timespec *ts, uint64_t ns_from_now);
void tki_bump_gen(tk_client *cl);
void tki_cond_init_mono(pthread_cond_t *cv);
void tki_copy_msg(char *dst, size_t n, const char *src);
void tki_futex_wait(int *addr, int val, const struct timespec *rel);
void tki_futex_wake(int *addr, int n);
uint64_t tki_jitter(uint64_t step); /* uniform in [step/2, step] (M redirects) */
uint64_t tki_full_jitter(uint64_t step); /* uniform in [0, step] (reconnects, R16) */
void tki_logf_(tk_client *cl, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void tki_fork_setup(void); /* once per process: fork detection (pthread_atfork) */
uint64_t tki_step_delay(uint64_t base, uint64_t cap, int n);

#endif
