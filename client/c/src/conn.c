/* libticketing: one connection: the pipeline (req_id table, write buffer, writer role),
 * response dispatch, the I/O thread with reconnect backoff, endpoints, the picker. */
#include "tk_internal.h"

/* ------------------------------------------------------------ connections */

void tki_wake_fd(int fd) {
    uint64_t one = 1;
    ssize_t r = write(fd, &one, sizeof one);
    (void)r;
}

void tki_drain_fd(int fd) {
    uint64_t v;
    ssize_t r = read(fd, &v, sizeof v);
    (void)r;
}


void tki_call_free(call *c) {
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
    if (kick) tki_wake_fd(cn->efd);
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
    if (kick) tki_wake_fd(cn->efd);
}

/* A caller given its answer by dispatch runs again: the last one writes. */
void tki_conn_settle(conn *cn) {
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
int tki_conn_abandon(call *c) {
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

int tki_conn_drop(call *c) {
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
        tki_complete(cn->cl, list);
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
            tki_complete(cn->cl, done);
            done = n;
        }
    }
    return bad ? -1 : (long)off;
}

static void set_last_err(tk_client *cl, tk_status st, uint8_t code, const char *why) {
    pthread_mutex_lock(&cl->mu);
    cl->last_err = st;
    cl->last_code = code;
    tki_copy_msg(cl->last_msg, sizeof cl->last_msg, why ? why : "");
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
                ssize_t w = tki_io_write(cn, cn->obuf + cn->ooff, cn->olen - cn->ooff);
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
            ssize_t r = tki_io_read(cn, rbuf + rlen, room, &want_write);
            if (r < 0) goto dead;
            if (r == 0) break;
            rlen += (size_t)r;
            long used = dispatch(cn, rbuf, rlen);
            if (used < 0) {
                tki_logf_(cn->cl, 3, "ticketing: protocol violation by %s; reconnecting", cn->addr);
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
        if (pr > 0 && (p[1].revents & POLLIN)) tki_drain_fd(cn->efd);
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
            uint64_t d = tki_full_jitter(tki_step_delay(100 * MS, 3200 * MS, attempt)); /* R16 */
            struct timespec ts;
            tki_abs_deadline(&ts, d);
            pthread_mutex_lock(&cl->mu);
            while (!cl->closed) {
                if (pthread_cond_timedwait(&cl->cv, &cl->mu, &ts) == ETIMEDOUT) break;
            }
            pthread_mutex_unlock(&cl->mu);
            if (is_closed(cl)) break;
        }
        uint32_t mi = 1;
        uint8_t rej = 0;
        tk_status st = tki_conn_connect(cn, &mi, &rej);
        if (st != TK_OK) {
            tki_close_sock(cn);
            if (is_closed(cl)) break;
            pthread_mutex_lock(&cn->mu);
            cn->failures++;
            int n = cn->failures;
            pthread_mutex_unlock(&cn->mu);
            if (n == 1 || st == TK_E_AUTH) tki_logf_(cl, 2, "ticketing: connect to %s failed: %s", cn->addr, tk_strerror(st));
            set_last_err(cl, st, rej, cn->why);
            if (st == TK_E_AUTH || st == TK_E_TLS) tki_bump_gen(cl); /* callers waiting for a connection fail now (R4/R5) */
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
        tki_logf_(cl, 1, "ticketing: connected to %s (max_inflight %u)", cn->addr, mi);
        set_last_err(cl, TK_OK, 0, NULL);
        tki_bump_gen(cl);
        tk_status why = conn_serve(cn);
        conn_kill(cn, why);
        /* no caller may be in send() on the socket when it is closed */
        pthread_mutex_lock(&cn->mu);
        while (cn->writer == W_CALLER) pthread_cond_wait(&cn->wcv, &cn->mu);
        cn->writer = W_NONE;
        cn->direct = 0;
        cn->olen = cn->ooff = 0;
        pthread_mutex_unlock(&cn->mu);
        tki_close_sock(cn);
        if (!is_closed(cl)) tki_logf_(cl, 2, "ticketing: connection to %s lost", cn->addr);
        attempt = 1;
    }
    conn_kill(cn, TK_E_CLOSED);
    return NULL;
}

int tki_split_addr(const char *a, char *host, size_t hl, char *port, size_t pl) {
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
int tki_add_endpoint(tk_client *cl, const char *addr, int n) {
    char host[256], port[16];
    if (tki_split_addr(addr, host, sizeof host, port, sizeof port) != 0) return -1;
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

void tki_follow(tk_client *cl, const char *addr) {
    if (!addr[0]) {
        __atomic_store_n(&cl->leader, -1, __ATOMIC_RELEASE);
        return;
    }
    pthread_mutex_lock(&cl->mu);
    int idx = -1;
    for (int i = 0; i < cl->neps; i++)
        if (strcmp(cl->eps[i].addr, addr) == 0) idx = i;
    if (idx < 0 && !cl->closed && cl->extra < MAX_EXTRA) {
        idx = tki_add_endpoint(cl, addr, 1);
        if (idx >= 0) {
            cl->extra++;
            tki_logf_(cl, 1, "ticketing: following the leader to %s", addr);
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
int tki_first_connecting(tk_client *cl) {
    int nc = __atomic_load_n(&cl->nconns, __ATOMIC_ACQUIRE);
    for (int i = 0; i < nc; i++)
        if (conn_is_connecting(cl->conns[i])) return 1;
    return 0;
}

/* Leader first, then round robin. */
int tki_try_enqueue(tk_client *cl, call *c) {
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
