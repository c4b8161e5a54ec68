/* libticketing: the client: configuration, TLS context, label, connection pool lifecycle. */
#include "tk_internal.h"

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
        if (!cfg->addrs[i] || tki_split_addr(cfg->addrs[i], h, sizeof h, p, sizeof p) != 0)
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
    tki_fork_setup();
    cl->fork_gen = __atomic_load_n(&tki_fork_gen, __ATOMIC_RELAXED);
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
            tki_logf_(cl, 3, "ticketing: %s", g_new_error);
            free(cl->jobs);
            free(cl);
            errno = err;
            return NULL;
        }
        if (cfg->tls->server_name) snprintf(cl->server_name, sizeof cl->server_name, "%s", cfg->tls->server_name);
    }
    pthread_mutex_init(&cl->mu, NULL);
    pthread_mutex_init(&cl->qmu, NULL);
    tki_cond_init_mono(&cl->cv);
    pthread_mutex_init(&cl->rmu, NULL);
    pthread_cond_init(&cl->rcv, NULL);
    pthread_create(&cl->rel_th, NULL, tki_releaser_main, cl);
    pthread_mutex_lock(&cl->mu);
    int per = cfg->n_addrs == 1 ? 2 : 1;
    for (size_t i = 0; i < cfg->n_addrs; i++) {
        int dup = 0;
        for (int j = 0; j < cl->neps; j++) dup |= strcmp(cl->eps[j].addr, cfg->addrs[i]) == 0;
        if (!dup) tki_add_endpoint(cl, cfg->addrs[i], per);
    }
    pthread_mutex_unlock(&cl->mu);
    return cl;
}

/* The reason of a failed wait for a connection, for tk_errmsg() (cl->mu held). */
static tk_status connect_failed(tk_client *cl, tk_status st) {
    snprintf(tki_errmsg, sizeof tki_errmsg, "connect: %s", cl->last_msg[0] ? cl->last_msg : tk_strerror(st));
    return st;
}

tk_status tk_client_wait_connected(tk_client *cl, uint32_t timeout_ms) {
    if (forked(cl)) return TK_E_FORKED;
    struct timespec ts;
    tki_abs_deadline(&ts, (uint64_t)(timeout_ms ? timeout_ms : cl->connect_timeout_ms) * MS);
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
    tki_bump_gen(cl);
    pthread_cond_broadcast(&cl->cv);
    int n = cl->nconns;
    pthread_mutex_unlock(&cl->mu);
    pthread_mutex_lock(&cl->rmu);
    pthread_cond_broadcast(&cl->rcv);
    pthread_mutex_unlock(&cl->rmu);
    for (int i = 0; i < n; i++) tki_wake_fd(cl->conns[i]->efd);
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
