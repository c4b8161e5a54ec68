/* libticketing: socket I/O (plain or TLS), dial, TLS and the handshake (HELLO, AUTH, the
 * feature ping and label of protocol 1.1, §12), run by a connection's I/O thread. */
#include "tk_internal.h"

/* ---- socket I/O (plain or TLS), non-blocking */

/* >0 bytes, 0 would block, -1 error/EOF */
ssize_t tki_io_read(conn *cn, void *b, size_t n, int *want_write) {
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

ssize_t tki_io_write(conn *cn, const void *b, size_t n) {
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
        if (r > 0 && (p[1].revents & POLLIN)) tki_drain_fd(cn->efd);
        if (r > 0 && p[0].revents) return 1;
    }
}

static int read_full(conn *cn, uint8_t *b, size_t n, uint64_t deadline) {
    size_t got = 0;
    while (got < n) {
        int ww;
        ssize_t r = tki_io_read(cn, b + got, n - got, &ww);
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
        ssize_t r = tki_io_write(cn, b + put, n - put);
        if (r < 0) return -1;
        if (r > 0) {
            put += (size_t)r;
            continue;
        }
        if (wait_sock(cn, POLLOUT | POLLIN, deadline) != 1) return -1;
    }
    return 0;
}

void tki_close_sock(conn *cn) {
    if (cn->ssl) {
        SSL_free(cn->ssl);
        cn->ssl = NULL;
    }
    if (cn->fd >= 0) {
        close(cn->fd);
        cn->fd = -1;
    }
}

/* The TCP connection (the first address of the name that answers), with
 * TCP_NODELAY and keepalive; cn->why says why not. */
static tk_status dial(conn *cn, uint64_t deadline) {
    tk_client *cl = cn->cl;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(cn->host, cn->port, &hints, &res) != 0 || !res) {
        snprintf(cn->why, sizeof cn->why, "cannot resolve %s", cn->addr);
        return TK_E_CONNECT;
    }
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
    return TK_OK;
}

/* TLS over cn->fd: SNI and the name (or IP) to verify; a plaintext server's
 * answer is "does not speak TLS" (R5, §12.4). */
static tk_status tls_handshake(conn *cn, uint64_t deadline) {
    tk_client *cl = cn->cl;
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
            /* R5, §12.4: a plaintext server's HELLO ("TKTS") is not a TLS record */
            if (ee && (ERR_GET_REASON(ee) == SSL_R_WRONG_VERSION_NUMBER || ERR_GET_REASON(ee) == SSL_R_PACKET_LENGTH_TOO_LONG ||
                       ERR_GET_REASON(ee) == SSL_R_RECORD_LENGTH_MISMATCH))
                reason = "the server does not speak TLS (a plaintext ticketing server?)";
            else if (!reason)
                reason = "handshake error";
            snprintf(cn->why, sizeof cn->why, "TLS with %s: %s", cn->addr, reason);
            tki_logf_(cl, 2, "ticketing: TLS handshake with %s failed: %s", cn->addr, reason);
            return TK_E_TLS;
        }
        int w = wait_sock(cn, ev, deadline);
        if (w != 1) {
            snprintf(cn->why, sizeof cn->why, "no TLS handshake from %s within %u ms", cn->addr, cl->connect_timeout_ms);
            return w < 0 ? TK_E_CLOSED : TK_E_CONNECT;
        }
    }
    return TK_OK;
}

/* HELLO, AUTH (with the feature ping right behind it, §12.1), WELCOME and the
 * server's proof; a REJECT where HELLO belongs is the TLS hint (§12.4). */
static tk_status hello_auth(conn *cn, uint64_t deadline, uint32_t *max_inflight, uint8_t *rej_code) {
    tk_client *cl = cn->cl;
    tk_status st = TK_E_CONNECT;
    uint8_t hb[TK_HELLO_LEN], wb[TK_WELCOME_LEN], cnonce[32], proof[32];
    tk_hello h;
    tk_welcome w;
    cn->ssl_failed = 0;
    if (read_full(cn, hb, sizeof hb, deadline) != 0) {
        if (cn->ssl_failed) {
            snprintf(cn->why, sizeof cn->why, "TLS with %s: the server ended the session (a client certificate required?)", cn->addr);
            tki_logf_(cl, 2, "ticketing: TLS error from %s (a client certificate required?)", cn->addr);
        }
        return is_closed(cl) ? TK_E_CLOSED : cn->ssl_failed ? TK_E_TLS : st;
    }
    int hd = tk_dec_hello(hb, &h);
    if (hd == -2) { /* a REJECT where HELLO belongs: a TLS listener's hint (§12.4) */
        *rej_code = h.flags;
        if (h.flags == TK_CODE_TLS_REQUIRED && !cn->ssl) {
            snprintf(cn->why, sizeof cn->why, "%s: the server requires TLS (REJECT TLS_REQUIRED); configure tls", cn->addr);
            tki_logf_(cl, 3, "ticketing: %s requires TLS; configure tls", cn->addr);
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
            tki_logf_(cl, 3, "ticketing: %s rejected the credentials%s", cn->addr,
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
            tki_logf_(cl, 3, "ticketing: %s did not prove the token (an impostor?)", cn->addr);
            return TK_E_AUTH;
        }
    }
    *max_inflight = w.max_inflight ? w.max_inflight : 1;
    return TK_OK;
}

/* The feature pong (§12.1), then the label when the server takes one (§12.3). */
static tk_status features_and_label(conn *cn, uint64_t deadline) {
    tk_client *cl = cn->cl;
    tk_status st = TK_E_CONNECT;
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
        if (pr.status == 'E') tki_logf_(cl, 2, "ticketing: %s refused the connection label (code %u)", cn->addr, pr.code);
    }
    return TK_OK;
}

/* Dial + TLS + handshake + features + label, within connect_timeout_ms.
 * Returns TK_OK and max_inflight. */
tk_status tki_conn_connect(conn *cn, uint32_t *max_inflight, uint8_t *rej_code) {
    tk_client *cl = cn->cl;
    snprintf(cn->why, sizeof cn->why, "no connection to %s", cn->addr);
    uint64_t deadline = tk_now_ns() + (uint64_t)cl->connect_timeout_ms * MS;
    tk_status st = dial(cn, deadline);
    if (st == TK_OK && cl->ssl_ctx) st = tls_handshake(cn, deadline);
    if (st == TK_OK) st = hello_auth(cn, deadline, max_inflight, rej_code);
    if (st == TK_OK) st = features_and_label(cn, deadline);
    return st;
}
