/* libticketing: clock, jitter, futex, fork detection, status texts. */
#include "tk_internal.h"

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

void tki_logf_(tk_client *cl, int level, const char *fmt, ...) {
    if (!cl->log) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    cl->log(cl->log_ud, level, buf);
}

/* snprintf(dst, n, "%s", src) without the format machinery (once per op) */
void tki_copy_msg(char *dst, size_t n, const char *src) {
    size_t l = strlen(src);
    if (l >= n) l = n - 1;
    memcpy(dst, src, l);
    dst[l] = 0;
}

void tki_abs_deadline(struct timespec *ts, uint64_t ns_from_now) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    uint64_t t = (uint64_t)ts->tv_nsec + ns_from_now;
    ts->tv_sec += (time_t)(t / 1000000000ull);
    ts->tv_nsec = (long)(t % 1000000000ull);
}

void tki_cond_init_mono(pthread_cond_t *cv) {
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

uint64_t tki_jitter(uint64_t step) {
    if (step <= 1) return step;
    uint64_t half = step / 2;
    return half + rand_u64() % (step - half + 1);
}

/* R16 (docs/architecture.md): "full jitter", uniform in [0, step], from a
 * per-process random source: clients that lost one server at the same instant
 * spread their reconnects over the whole step. */
uint64_t tki_full_jitter(uint64_t step) { return step ? rand_u64() % (step + 1) : 0; }

uint64_t tki_step_delay(uint64_t base, uint64_t cap, int n) {
    uint64_t d = base;
    for (int i = 1; i < n && d < cap; i++) d *= 2;
    return d < cap ? d : cap;
}

/* fork detection without a getpid() system call per request */
unsigned tki_fork_gen;
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;
static void on_fork_child(void) { __atomic_add_fetch(&tki_fork_gen, 1, __ATOMIC_RELAXED); }
static void fork_init(void) { pthread_atfork(NULL, NULL, on_fork_child); }
void tki_fork_setup(void) { pthread_once(&g_fork_once, fork_init); }


/* rel NULL: no timeout. Returns when *addr != val, on a wake-up (maybe
 * spurious) or at the timeout; callers re-check their condition. */
void tki_futex_wait(int *addr, int val, const struct timespec *rel) {
    syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, rel, NULL, 0);
}

void tki_futex_wake(int *addr, int n) { syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0); }


void tki_bump_gen(tk_client *cl) {
    __atomic_add_fetch(&cl->gen, 1, __ATOMIC_RELEASE);
    if (__atomic_load_n(&cl->gen_waiters, __ATOMIC_ACQUIRE) > 0) tki_futex_wake(&cl->gen, 1 << 30);
    pthread_mutex_lock(&cl->qmu);
    for (tk_queue *q = cl->queues; q; q = q->cl_next) {
        __atomic_store_n(&q->retry, 1, __ATOMIC_RELEASE);
        tki_queue_signal(q);
    }
    pthread_mutex_unlock(&cl->qmu);
}
