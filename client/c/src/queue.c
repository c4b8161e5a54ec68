/* libticketing: the completion queue (tk_queue_*): many ops from one event-loop thread. */
#include "tk_internal.h"

/* ---------------------------------------------------------------- queue */

/* The I/O thread hands an answered op to its queue; one eventfd write per
 * burst (while the queue's thread has not drained the previous one). */
static void queue_signal_locked(tk_queue *q) {
    if (!q->signalled) {
        q->signalled = 1;
        tki_wake_fd(q->efd);
    }
}

void tki_queue_push(tk_queue *q, tk_op *op) {
    pthread_mutex_lock(&q->mu);
    op->qnext = NULL;
    *q->ready_tail = op;
    q->ready_tail = &op->qnext;
    queue_signal_locked(q);
    pthread_mutex_unlock(&q->mu);
}

void tki_queue_signal(tk_queue *q) {
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
    uint64_t ns = tki_op_wait_ns(op);
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
    tki_op_init(op, q->cl, kind, key, klen);
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
    tki_op_step(op);
    queue_settle(q, op, now);
    if (op->done) tki_queue_signal(q);
}

tk_status tk_queue_acquire_ex(tk_queue *q, const void *key, size_t klen, uint32_t lease_ms, uint32_t wait_ms,
                              const tk_acquire_opts *opts, void *user, tk_op **op_out) {
    if (op_out) *op_out = NULL;
    tk_status st = tki_start_check(q ? q->cl : NULL, K_ACQUIRE, key, klen, lease_ms, 0, NULL);
    if (st != TK_OK) return st;
    tk_op *op = queue_op(q, K_ACQUIRE, key, klen, user);
    if (!op) return TK_E_NOMEM;
    op->min_remaining = tki_min_rem(opts);
    tki_acquire_budget(op, lease_ms, wait_ms);
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
    uint8_t *body = tki_set_body(kind, keys, n, &blen, &st, NULL);
    if (!body) return st;
    if ((st = tki_start_check(q ? q->cl : NULL, kind, keys[0].data, keys[0].len, lease_ms, token, NULL)) != TK_OK) {
        free(body);
        return st;
    }
    tk_op *op = queue_op(q, kind, keys[0].data, keys[0].len, user);
    if (!op) {
        free(body);
        return TK_E_NOMEM;
    }
    tki_op_take_set(op, body, blen, n);
    if (kind == K_ACQUIRE) {
        tki_acquire_budget(op, lease_ms, wait_ms);
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
    tk_status st = tki_start_check(q ? q->cl : NULL, K_RELEASE, key, klen, 1, token, NULL);
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
    if (op->c && !op->completed && tki_conn_abandon(op->c)) {
        op->c = NULL; /* the I/O thread owns it now and compensates a grant */
    }
    queue_step(q, op); /* finishes now unless the answer is on its way (then at its arrival) */
}

/* Steps every op the I/O threads answered, and every op whose timer came. */
static void queue_drive(tk_queue *q) {
    pthread_mutex_lock(&q->mu);
    if (q->signalled) { /* drained under the lock: a push after it writes again */
        tki_drain_fd(q->efd);
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
        tki_op_step(r);
        queue_settle(q, r, now);
        r = n;
    }
    if (now < q->next_timer && !__atomic_exchange_n(&q->retry, 0, __ATOMIC_ACQ_REL)) return;
    q->next_timer = UINT64_MAX;
    for (tk_op *op = q->live, *n; op; op = n) {
        n = op->lnext;
        if (tki_op_wait_ns(op) == 0) tki_op_step(op);
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
        tki_fill_out(op, &e->lease);
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
    if (q->done) tki_queue_signal(q); /* more than n: the fd stays readable */
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
                tki_compensate_set(q->cl, op->key, op->klen, op->set, op->setlen, op->count, op->token);
            tki_op_finish(op, TK_E_CANCELLED, 0, NULL);
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
            tki_compensate_set(q->cl, op->key, op->klen, op->set, op->setlen, op->count, op->lease_out.token);
    queue_release_memory(q, 1);
}
