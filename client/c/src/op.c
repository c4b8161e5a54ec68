/* libticketing: the acquire / release state machine (retry, M, cancel, R2 allowance, R14),
 * messages that say where (R15), argument checks (R8), the tk_op_* form. */
#include "tk_internal.h"

/* ------------------------------------------------------------------- ops */

static void op_notify(tk_op *op) {
    pthread_mutex_lock(&op->mu);
    op->completed = 1;
    pthread_cond_broadcast(&op->cv);
    if (op->efd >= 0) tki_wake_fd(op->efd);
    pthread_mutex_unlock(&op->mu);
}


void tki_complete(tk_client *cl, call *c) {
    switch (c->owner) {
    case OWN_OP: {
        tk_op *op = c->opref;
        if (op->async == A_QUEUE) {
            tki_queue_push(op->q, op); /* op belongs to the queue's thread from here */
        } else if (op->async) {
            op_notify(op);
        } else if (__atomic_exchange_n(&op->cstate, CS_DONE, __ATOMIC_ACQ_REL) == CS_SLEEP) {
            /* only this caller; op may be gone once CS_DONE is visible, and a
             * late wake-up of a reused address is tolerated (waiters re-check) */
            tki_futex_wake(&op->cstate, 1);
        }
        break;
    }
    case OWN_ABANDONED:
        if ((c->op == 'A' || c->op == 'S') && c->fail == F_NONE && c->status == 'G') {
            tki_logf_(cl, 1, "ticketing: releasing a grant that arrived after its acquire was cancelled");
            tki_compensate_set(cl, c->key, c->klen, c->set, c->setlen, c->count, c->value);
        }
        tki_call_free(c);
        break;
    default: tki_call_free(c); break;
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

__thread char tki_errmsg[640]; /* tk_errmsg(): the calling thread's last failure */

const char *tk_errmsg(void) { return tki_errmsg; }

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

void tki_op_finish(tk_op *op, tk_status st, uint8_t code, const char *msg) {
    op->done = 1;
    op->result = st;
    op->code = code;
    if (st == TK_OK)
        tki_copy_msg(op->msg, sizeof op->msg, "ok");
    else
        where_msg(op->msg, sizeof op->msg, op, st, code, msg);
    if (op->async == A_OP) {
        if (op->efd >= 0) tki_wake_fd(op->efd);
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

static uint64_t redirect_delay(int n) { return tki_jitter(tki_step_delay(25 * MS, 200 * MS, n)); }

/* Interprets the answer of op->c (op->mu held). */
static void op_answer(tk_op *op, call *c, uint64_t now) {
    tk_client *cl = op->cl;
    if (c->cn) op->addr = c->cn->addr;
    if (op->kind == K_ACQUIRE) {
        if (op->cancel_req) {
            if (c->fail == F_NONE && c->status == 'G') tki_compensate_set(cl, op->key, op->klen, op->set, op->setlen, op->count, c->value);
            tki_op_finish(op, TK_E_CANCELLED, 0, NULL);
            return;
        }
        if (c->fail == F_LOST) {
            tki_op_finish(op, is_closed(cl) ? TK_E_CLOSED : TK_INDETERMINATE, 0,
                      is_closed(cl) ? NULL : "connection lost after the request was written");
            return;
        }
        if (c->fail == F_UNSENT) {
            if (is_closed(cl)) tki_op_finish(op, TK_E_CLOSED, 0, NULL);
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
                    tki_compensate_set(cl, op->key, op->klen, op->set, op->setlen, op->count, c->value);
                    char m[128];
                    snprintf(m, sizeof m, "granted with %lld ms of the lease left, below min_remaining %u ms: released",
                             (long long)left, op->min_remaining);
                    memset(&op->lease_out, 0, sizeof op->lease_out);
                    tki_op_finish(op, TK_INSUFFICIENT_LEASE, 0, m);
                    return;
                }
            }
            tki_op_finish(op, TK_OK, 0, "ok");
            return;
        case 'T': tki_op_finish(op, TK_TIMEOUT, 0, NULL); return;
        case 'B': tki_op_finish(op, TK_BUSY, c->code, NULL); return;
        case 'U': tki_op_finish(op, TK_INDETERMINATE, c->code, "the cluster could not confirm the commit"); return;
        case 'E': tki_op_finish(op, TK_E_INVALID, c->code, c->payload[0] ? c->payload : NULL); return;
        case 'M':
            tki_follow(cl, c->payload);
            op->grace_end = now + 1000 * MS; /* R1: a leader's new connection may take 1 s past the wait */
            if (++op->moves > MAX_MOVES) {
                uint64_t d = redirect_delay(++op->rounds);
                if (op->wait == 0 || op->budget_end <= now + d) {
                    /* said as the Go client says it (client/ops.go noLeaderErr): which case an operator has */
                    char m[TK_MAX_ERROR + 128];
                    if (c->payload[0])
                        snprintf(m, sizeof m, "no cluster leader: redirected %d times in a row to %s, which did not answer as the leader",
                                 op->moves, c->payload);
                    else
                        snprintf(m, sizeof m, "no cluster leader elected: the nodes answered %d times in a row that they know none (an election is under way, or a majority of the nodes is down)",
                                 op->moves);
                    tki_op_finish(op, TK_E_NO_LEADER, 0, m);
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
            tki_op_finish(op, TK_E_CLOSED, 0, NULL);
            return;
        }
        if (c->fail == F_LOST) {
            op->maybe = 1;
            op->next_try = now + redirect_delay(++op->retries);
        }
        return;
    }
    switch (c->status) {
    case 'O': tki_op_finish(op, TK_OK, 0, "ok"); return;
    case 'N':
        if (op->maybe)
            tki_op_finish(op, TK_INDETERMINATE, 0, "the token no longer holds the key; an earlier unconfirmed attempt may have released it");
        else
            tki_op_finish(op, TK_NOT_HOLDER, 0, NULL);
        return;
    case 'M':
        tki_follow(cl, c->payload);
        if (++op->moves > MAX_MOVES) {
            op->moves = 0;
            op->next_try = now + redirect_delay(++op->retries);
        }
        return;
    case 'U':
        op->maybe = 1;
        op->next_try = now + redirect_delay(++op->retries);
        return;
    default: tki_op_finish(op, TK_E_INVALID, c->code, c->payload[0] ? c->payload : NULL); return;
    }
}

/* One step of the state machine (op->mu held). */
void tki_op_step(tk_op *op) {
    tk_client *cl = op->cl;
    if (op->done) return;
    uint64_t now = tk_now_ns();
    if (op->completed && op->c) {
        call *c = op->c;
        op->c = NULL;
        op->completed = 0;
        op_answer(op, c, now);
        if (!c->embedded) tki_call_free(c);
        if (op->done) return;
    }
    if (op->cancel_req && !op->c) {
        tki_op_finish(op, TK_E_CANCELLED, 0, NULL);
        return;
    }
    if (op->c) {
        if (op->kind == K_RELEASE && now >= op->deadline && tki_conn_drop(op->c)) {
            op->c = NULL; /* the I/O thread frees it */
            tki_op_finish(op, TK_INDETERMINATE, 0, "release not confirmed within 5 s");
        } else if (op->kind == K_ACQUIRE && now >= op->answer_by && tki_conn_abandon(op->c)) {
            /* the server answers T by the wait at the latest: a connection that is up
             * but silent (a stopped process, a black-holed path) must not hold the
             * caller forever; C withdraws it, a late G is released by the client */
            op->c = NULL;
            tki_op_finish(op, TK_INDETERMINATE, 0, "no answer within the wait + the answer allowance (server unresponsive)");
        }
        return;
    }
    if (is_closed(cl)) {
        tki_op_finish(op, TK_E_CLOSED, 0, NULL);
        return;
    }
    if (now < op->next_try) return;
    if (op->kind == K_ACQUIRE && op->wait > 0 && (op->ever_sent || now > op->start + MS)) {
        /* the wait bounds the whole call: time spent connecting or retrying counts */
        if (op->budget_end < now + MS) {
            if (op->ever_sent) {
                tki_op_finish(op, TK_TIMEOUT, 0, NULL);
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
    int r = tki_try_enqueue(cl, c);
    if (r == ENQ_OK) {
        op->c = c;
        op->ever_sent = 1;
        /* R2: counted from the write (the frame is handed to the socket now) */
        if (op->kind == K_ACQUIRE) op->answer_by = now + (uint64_t)c->wait * MS + cl->allowance_ns;
        return;
    }
    if (r == ENQ_UNSUP) {
        tki_op_finish(op, TK_E_UNSUPPORTED, 0, "key sets are not supported by this server (protocol 1.1, KEY_SETS)");
        return;
    }
    if (r == ENQ_DOWN && op->kind == K_ACQUIRE) {
        /* R4/R5: no connection and the last attempt failed authentication or
         * TLS: that will not change within the wait; fail now with the reason */
        pthread_mutex_lock(&cl->mu);
        tk_status hard = cl->last_err;
        uint8_t code = cl->last_code;
        char why[128];
        tki_copy_msg(why, sizeof why, cl->last_msg);
        pthread_mutex_unlock(&cl->mu);
        if (hard == TK_E_AUTH || hard == TK_E_TLS) {
            tki_op_finish(op, hard, code, why[0] ? why : NULL);
            return;
        }
    }
    uint64_t limit = op->kind == K_RELEASE ? op->deadline : op->budget_end;
    /* R1: the wait bounds the whole call, connecting included; a connection
     * being opened for the first time may be waited for up to 1 s past it */
    if (op->kind == K_ACQUIRE && r == ENQ_DOWN && limit < op->grace_end && now >= limit && tki_first_connecting(cl))
        limit = op->grace_end;
    if (now >= limit) {
        if (op->kind == K_RELEASE)
            tki_op_finish(op, op->maybe ? TK_INDETERMINATE : TK_E_CONNECT, 0, "release not confirmed within 5 s");
        else if (r == ENQ_FULL)
            tki_op_finish(op, TK_TIMEOUT, 0, "no free max_inflight slot within the wait");
        else {
            pthread_mutex_lock(&cl->mu);
            uint8_t code = cl->last_code;
            pthread_mutex_unlock(&cl->mu);
            char why[128];
            pthread_mutex_lock(&cl->mu);
            tki_copy_msg(why, sizeof why, cl->last_msg);
            pthread_mutex_unlock(&cl->mu);
            tki_op_finish(op, connect_failure(cl), code, why[0] ? why : NULL);
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
uint64_t tki_op_wait_ns(tk_op *op) {
    if (op->done) return 0;
    uint64_t now = tk_now_ns();
    if (op->completed) return 0;
    if (op->c) {
        uint64_t end = op->kind == K_RELEASE ? op->deadline : op->answer_by;
        return end > now ? end - now : 0;
    }
    return op->next_try > now ? op->next_try - now : 0;
}


void tki_op_init(tk_op *op, tk_client *cl, int kind, const void *key, size_t klen) {
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
void tki_acquire_budget(tk_op *op, uint32_t lease_ms, uint32_t wait_ms) {
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
    tki_op_init(op, cl, kind, key, klen);
    op->async = A_OP;
    pthread_mutex_init(&op->mu, NULL);
    tki_cond_init_mono(&op->cv);
    return op;
}

/* Blocking ops (tk_acquire, tk_release*) live on the caller's stack and only
 * the caller touches them: no lock; the I/O thread hands the answer over
 * through op->cstate and wakes this caller only (futex). */
tk_status tki_op_wait_blocking(tk_op *op, tk_lease *out) {
    tk_client *cl = op->cl;
    for (;;) {
        if (__atomic_load_n(&op->cstate, __ATOMIC_ACQUIRE) == CS_DONE) {
            op->cstate = CS_IDLE;
            op->completed = 1;
            if (op->inl.token) { /* before any other work (a log callback, a retry) */
                op->inl.token = 0;
                tki_conn_settle(op->inl.cn);
            }
        }
        tki_op_step(op);
        if (op->done) break;
        if (op->completed) continue;
        uint64_t ns = tki_op_wait_ns(op);
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
                tki_futex_wait(&op->cstate, CS_SLEEP, rp);
                int sl = CS_SLEEP; /* timeout or a stray wake-up: back to idle unless the answer is in */
                __atomic_compare_exchange_n(&op->cstate, &sl, CS_IDLE, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
            }
        } else {
            /* waiting to retry: woken early when a connection comes up */
            int g = __atomic_load_n(&cl->gen, __ATOMIC_ACQUIRE);
            __atomic_add_fetch(&cl->gen_waiters, 1, __ATOMIC_ACQ_REL);
            if (!is_closed(cl)) tki_futex_wait(&cl->gen, g, rp);
            __atomic_sub_fetch(&cl->gen_waiters, 1, __ATOMIC_ACQ_REL);
        }
    }
    tki_fill_out(op, out);
    return op->result;
}

void tki_fill_out(tk_op *op, tk_lease *out) {
    if (op->result != TK_OK) tki_copy_msg(tki_errmsg, sizeof tki_errmsg, op->msg);
    if (!out) return;
    if (op->result == TK_OK && op->kind == K_ACQUIRE) {
        *out = op->lease_out;
        return;
    }
    out->code = op->code;
    tki_copy_msg(out->message, sizeof out->message, op->msg);
}

tk_status tki_refuse(tk_status st, tk_lease *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tki_errmsg, sizeof tki_errmsg, fmt, ap);
    va_end(ap);
    if (out) {
        out->code = 0;
        tki_copy_msg(out->message, sizeof out->message, tki_errmsg);
    }
    return st;
}

/* R8: a key is refused before anything is sent, the message naming the
 * argument and its limit (the bytes of an invalid key are not echoed). */
static tk_status check_key(const char *op, const void *key, size_t klen, tk_lease *out) {
    if (klen == 0 || klen > TK_MAX_KEY || !key)
        return tki_refuse(TK_E_INVALID, out, "%s: key must be 1..%d bytes (got %zu)", op, TK_MAX_KEY, key ? klen : 0);
    if (!tk_key_ok((const uint8_t *)key, klen))
        return tki_refuse(TK_E_INVALID, out,
                      "%s: key must be 1..%d bytes of valid UTF-8 without control characters (got %zu bytes that are not)",
                      op, TK_MAX_KEY, klen);
    return TK_OK;
}

/* The checks every call that starts an op makes before anything is sent:
 * the client, the key, lease >= 1 (acquire) or token != 0 (release). */
tk_status tki_start_check(tk_client *cl, int kind, const void *key, size_t klen, uint32_t lease_ms, uint64_t token,
                             tk_lease *out) {
    const char *op = kind == K_ACQUIRE ? "acquire" : "release";
    if (!cl) return tki_refuse(TK_E_INVALID, out, "%s: no client (NULL)", op);
    if (forked(cl)) return tki_refuse(TK_E_FORKED, out, "%s: %s", op, tk_strerror(TK_E_FORKED));
    tk_status st = check_key(op, key, klen, out);
    if (st != TK_OK) return st;
    if (kind == K_ACQUIRE && lease_ms == 0)
        return tki_refuse(TK_E_INVALID, out, "%s \"%.*s\": lease must be 1..4294967295 ms (got 0)", op, (int)klen, (const char *)key);
    if (kind == K_RELEASE && token == 0)
        return tki_refuse(TK_E_INVALID, out, "%s \"%.*s\": token must be 1..18446744073709551615 (got 0, never issued)", op,
                      (int)klen, (const char *)key);
    if (is_closed(cl)) return tki_refuse(TK_E_CLOSED, out, "%s \"%.*s\": client closed", op, (int)klen, (const char *)key);
    return TK_OK;
}

/* A key set's body from keys[] (R8 for every key, 2..16, distinct): heap, or NULL with the refusal. */
uint8_t *tki_set_body(int kind, const tk_key *keys, size_t n, size_t *blen, tk_status *st, tk_lease *out) {
    const char *op = kind == K_ACQUIRE ? "acquire_set" : "release_set";
    *st = TK_OK;
    if (!keys || n < TK_SET_MIN || n > TK_SET_MAX) {
        *st = tki_refuse(TK_E_INVALID, out, "%s: a key set has 2..16 keys (got %zu)", op, keys ? n : 0);
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
        *st = tki_refuse(TK_E_NOMEM, out, "%s: out of memory", op);
        return NULL;
    }
    const char *why;
    size_t bad;
    *blen = tk_enc_set_body(b, ks, ls, n, &why, &bad);
    if (*blen == 0) {
        free(b);
        *st = tki_refuse(TK_E_INVALID, out, "%s: keys[%zu] \"%.*s\" appears twice (2..16 distinct keys)", op, bad,
                     (int)ls[bad], (const char *)ks[bad]);
        return NULL;
    }
    return b;
}

/* Gives a started op its set (kind's checks done by the caller). */
void tki_op_take_set(tk_op *op, uint8_t *body, size_t blen, size_t n) {
    op->set = body;
    op->setlen = blen;
    op->count = (uint8_t)n;
}

uint32_t tki_min_rem(const tk_acquire_opts *o) {
    return o && (o->size == 0 || o->size >= offsetof(tk_acquire_opts, min_remaining_ms) + 4) ? o->min_remaining_ms : 0;
}

/* Starts a pollable acquire of one key, or of a key set when body is not NULL
 * (the body belongs to the op from here, or is freed). */
static tk_status start_op(tk_client *cl, const void *key, size_t klen, uint8_t *body, size_t blen, size_t n,
                          uint32_t lease_ms, uint32_t wait_ms, uint32_t min_remaining, tk_op **op_out) {
    tk_status st = tki_start_check(cl, K_ACQUIRE, key, klen, lease_ms, 0, NULL);
    tk_op *op = st == TK_OK ? op_new(cl, K_ACQUIRE, key, klen) : NULL;
    if (!op) {
        free(body);
        return st == TK_OK ? TK_E_NOMEM : st;
    }
    if (body) tki_op_take_set(op, body, blen, n);
    op->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    op->min_remaining = min_remaining;
    tki_acquire_budget(op, lease_ms, wait_ms);
    pthread_mutex_lock(&op->mu);
    tki_op_step(op);
    pthread_mutex_unlock(&op->mu);
    *op_out = op;
    return TK_OK;
}

tk_status tk_acquire_start_ex(tk_client *cl, const void *key, size_t klen, uint32_t lease_ms, uint32_t wait_ms,
                              const tk_acquire_opts *opts, tk_op **op_out) {
    *op_out = NULL;
    return start_op(cl, key, klen, NULL, 0, 0, lease_ms, wait_ms, tki_min_rem(opts), op_out);
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
    uint8_t *body = tki_set_body(K_ACQUIRE, keys, n, &blen, &st, NULL);
    if (!body) return st;
    return start_op(cl, keys[0].data, keys[0].len, body, blen, n, lease_ms, wait_ms, 0, op_out);
}

int tk_op_fd(tk_op *op) { return op->efd; }

int tk_op_timeout_ms(tk_op *op) {
    pthread_mutex_lock(&op->mu);
    uint64_t ns = tki_op_wait_ns(op);
    pthread_mutex_unlock(&op->mu);
    if (ns == UINT64_MAX) return -1;
    return (int)((ns + MS - 1) / MS);
}

tk_status tk_op_drive(tk_op *op, tk_lease *out) {
    if (op->efd >= 0) tki_drain_fd(op->efd);
    pthread_mutex_lock(&op->mu);
    tki_op_step(op);
    tk_status st = op->done ? op->result : TK_PENDING;
    if (op->done) tki_fill_out(op, out);
    pthread_mutex_unlock(&op->mu);
    return st;
}

tk_status tk_op_wait(tk_op *op, tk_lease *out) {
    pthread_mutex_lock(&op->mu);
    for (;;) {
        tki_op_step(op);
        if (op->done) break;
        uint64_t ns = tki_op_wait_ns(op);
        if (ns == 0) continue;
        if (op->completed) continue;
        if (ns == UINT64_MAX) {
            pthread_cond_wait(&op->cv, &op->mu);
        } else {
            struct timespec ts;
            tki_abs_deadline(&ts, ns);
            pthread_cond_timedwait(&op->cv, &op->mu, &ts);
        }
    }
    tki_fill_out(op, out);
    tk_status st = op->result;
    pthread_mutex_unlock(&op->mu);
    return st;
}

void tk_op_cancel(tk_op *op) {
    pthread_mutex_lock(&op->mu);
    if (!op->done) {
        op->cancel_req = 1;
        if (op->c && !op->completed && tki_conn_abandon(op->c)) {
            op->c = NULL; /* the I/O thread owns it now and compensates a grant */
        }
        tki_op_step(op);
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
            tki_op_step(op);
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
