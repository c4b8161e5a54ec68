/* libticketing: the blocking lock API (tk_acquire*, tk_release*, key sets, R6, R12) and
 * the background releaser (compensations). */
#include "tk_internal.h"

tk_status tk_acquire_ex(tk_client *cl, const void *key, size_t klen, uint32_t lease_ms, uint32_t wait_ms,
                        const tk_acquire_opts *opts, tk_lease *out) {
    /* a grant nobody can see could never be released */
    if (!out) return tki_refuse(TK_E_INVALID, NULL, "acquire: out must not be NULL (the lease is the only way to release)");
    tk_status st = tki_start_check(cl, K_ACQUIRE, key, klen, lease_ms, 0, out);
    if (st != TK_OK) return st;
    tk_op op;
    tki_op_init(&op, cl, K_ACQUIRE, key, klen);
    op.min_remaining = tki_min_rem(opts);
    tki_acquire_budget(&op, lease_ms, wait_ms);
    return tki_op_wait_blocking(&op, out);
}

tk_status tk_acquire(tk_client *cl, const void *key, size_t klen, uint32_t lease_ms, uint32_t wait_ms,
                     tk_lease *out) {
    return tk_acquire_ex(cl, key, klen, lease_ms, wait_ms, NULL, out);
}

tk_status tk_acquire_set(tk_client *cl, const tk_key *keys, size_t n, uint32_t lease_ms, uint32_t wait_ms,
                         tk_lease *out) {
    if (!out) return tki_refuse(TK_E_INVALID, NULL, "acquire_set: out must not be NULL (the lease is the only way to release)");
    size_t blen = 0;
    tk_status st;
    uint8_t *body = tki_set_body(K_ACQUIRE, keys, n, &blen, &st, out);
    if (!body) return st;
    if ((st = tki_start_check(cl, K_ACQUIRE, keys[0].data, keys[0].len, lease_ms, 0, out)) != TK_OK) {
        free(body);
        return st;
    }
    tk_op op;
    tki_op_init(&op, cl, K_ACQUIRE, keys[0].data, keys[0].len);
    tki_op_take_set(&op, body, blen, n);
    tki_acquire_budget(&op, lease_ms, wait_ms);
    st = tki_op_wait_blocking(&op, out);
    free(body);
    return st;
}

static tk_status release_until(tk_client *cl, const void *key, size_t klen, const uint8_t *set, size_t setlen,
                               uint8_t count, uint64_t token, uint64_t deadline, uint8_t *code) {
    tk_op op;
    tki_op_init(&op, cl, K_RELEASE, key, klen);
    op.set = (uint8_t *)set; /* the caller's: freed by the caller */
    op.setlen = setlen;
    op.count = count;
    op.token = token;
    op.deadline = deadline;
    tk_lease tmp;
    tk_status st = tki_op_wait_blocking(&op, &tmp);
    if (code) *code = st == TK_OK ? 0 : tmp.code;
    return st;
}

tk_status tk_release_token(tk_client *cl, const void *key, size_t klen, uint64_t token, uint8_t *code) {
    if (code) *code = 0;
    tk_status st = tki_start_check(cl, K_RELEASE, key, klen, 1, token, NULL); /* R8: token 0 is never issued */
    if (st != TK_OK) return st;
    return release_until(cl, key, klen, NULL, 0, 0, token, tk_now_ns() + REL_WINDOW_NS, code);
}

tk_status tk_release(tk_client *cl, const tk_lease *l) {
    if (!l) return tki_refuse(TK_E_INVALID, NULL, "release: no lease (NULL)");
    return tk_release_token(cl, l->key, l->key_len, l->token, NULL);
}

tk_status tk_release_lease(tk_client *cl, tk_lease *l, int *already) {
    if (already) *already = 0;
    if (!l) return tki_refuse(TK_E_INVALID, NULL, "release: no lease (NULL)");
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
    uint8_t *body = tki_set_body(K_RELEASE, keys, n, &blen, &st, NULL);
    if (!body) return st;
    if ((st = tki_start_check(cl, K_RELEASE, keys[0].data, keys[0].len, 1, token, NULL)) == TK_OK)
        st = release_until(cl, keys[0].data, keys[0].len, body, blen, (uint8_t)n, token, tk_now_ns() + REL_WINDOW_NS,
                           code);
    free(body);
    return st;
}

/* -------------------------------------------------------------- releaser */

void tki_compensate_set(tk_client *cl, const uint8_t *key, size_t klen, const uint8_t *set, size_t setlen,
                           uint8_t count, uint64_t token) {
    uint8_t *copy = NULL;
    if (set && !(copy = malloc(setlen))) {
        tki_logf_(cl, 2, "ticketing: out of memory; an abandoned set grant stays held until its lease ends");
        return;
    }
    if (set) memcpy(copy, set, setlen);
    pthread_mutex_lock(&cl->rmu);
    if (cl->jcount >= REL_QUEUE || cl->closed) {
        pthread_mutex_unlock(&cl->rmu);
        free(copy);
        tki_logf_(cl, 2, "ticketing: release queue full; an abandoned grant stays held until its lease ends");
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

void *tki_releaser_main(void *arg) {
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
        if (st != TK_OK) tki_logf_(cl, 2, "ticketing: background release failed: %s", tk_strerror(st));
        pthread_mutex_lock(&cl->rmu);
    }
    pthread_mutex_unlock(&cl->rmu);
    return NULL;
}
