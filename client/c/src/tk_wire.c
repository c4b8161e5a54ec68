#include "tk_wire.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <string.h>

void tk_put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
void tk_put32(uint8_t *p, uint32_t v) { tk_put16(p, (uint16_t)(v >> 16)); tk_put16(p + 2, (uint16_t)v); }
void tk_put64(uint8_t *p, uint64_t v) { tk_put32(p, (uint32_t)(v >> 32)); tk_put32(p + 4, (uint32_t)v); }
uint16_t tk_get16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
uint32_t tk_get32(const uint8_t *p) { return ((uint32_t)tk_get16(p) << 16) | tk_get16(p + 2); }
uint64_t tk_get64(const uint8_t *p) { return ((uint64_t)tk_get32(p) << 32) | tk_get32(p + 4); }

static size_t hdr(uint8_t *out, uint8_t op, size_t klen, uint32_t req_id, uint64_t arg, const uint8_t *key) {
    out[0] = op;
    out[1] = (uint8_t)klen;
    out[2] = out[3] = 0;
    tk_put32(out + 4, req_id);
    tk_put64(out + 8, arg);
    if (klen) memcpy(out + TK_HDR, key, klen);
    return TK_HDR + klen;
}

size_t tk_enc_acquire(uint8_t *out, uint32_t id, const uint8_t *key, size_t klen, uint32_t lease, uint32_t wait) {
    return hdr(out, 'A', klen, id, ((uint64_t)lease << 32) | wait, key);
}
size_t tk_enc_release(uint8_t *out, uint32_t id, const uint8_t *key, size_t klen, uint64_t token) {
    return hdr(out, 'R', klen, id, token, key);
}
size_t tk_enc_cancel(uint8_t *out, uint32_t id, const uint8_t *key, size_t klen, uint32_t target) {
    return hdr(out, 'C', klen, id, (uint64_t)target << 32, key);
}
size_t tk_enc_ping(uint8_t *out, uint32_t id) { return hdr(out, 'P', 0, id, 0, NULL); }
size_t tk_enc_ping_features(uint8_t *out, uint32_t id) { return hdr(out, 'P', 0, id, 1, NULL); }

size_t tk_enc_set_body(uint8_t *out, const uint8_t *const *keys, const size_t *lens, size_t n, const char **why,
                       size_t *bad) {
    *why = NULL;
    *bad = 0;
    if (n < TK_SET_MIN || n > TK_SET_MAX) {
        *why = "count";
        return 0;
    }
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        *bad = i;
        if (!keys[i] || !tk_key_ok(keys[i], lens[i])) {
            *why = "key";
            return 0;
        }
        for (size_t j = 0; j < i; j++)
            if (lens[j] == lens[i] && memcmp(keys[j], keys[i], lens[i]) == 0) {
                *why = "duplicate";
                return 0;
            }
        out[off++] = (uint8_t)lens[i];
        memcpy(out + off, keys[i], lens[i]);
        off += lens[i];
    }
    return off;
}

static size_t set_frame(uint8_t *out, uint8_t op, uint32_t id, uint8_t count, const uint8_t *body, size_t blen,
                        uint64_t arg) {
    out[0] = op;
    out[1] = count;
    tk_put16(out + 2, (uint16_t)blen);
    tk_put32(out + 4, id);
    tk_put64(out + 8, arg);
    memcpy(out + TK_HDR, body, blen);
    return TK_HDR + blen;
}
size_t tk_enc_acquire_set(uint8_t *out, uint32_t id, uint8_t count, const uint8_t *body, size_t blen, uint32_t lease,
                          uint32_t wait) {
    return set_frame(out, 'S', id, count, body, blen, ((uint64_t)lease << 32) | wait);
}
size_t tk_enc_release_set(uint8_t *out, uint32_t id, uint8_t count, const uint8_t *body, size_t blen, uint64_t token) {
    return set_frame(out, 'X', id, count, body, blen, token);
}
size_t tk_enc_label(uint8_t *out, uint32_t id, const uint8_t *label, size_t len) {
    return hdr(out, 'L', len, id, 0, label);
}

/* Length of the UTF-8 character at s[0] (valid, not a control character), or 0. */
static size_t utf8_char(const uint8_t *s, size_t n) {
    for (size_t sz = 1; sz <= 4 && sz <= n; sz++)
        if (tk_key_ok(s, sz)) return sz;
    return 0;
}

size_t tk_label_cut(const uint8_t *s, size_t n) {
    size_t off = 0, keep = 0;
    while (off < n) {
        size_t sz = utf8_char(s + off, n - off);
        if (sz == 0) return 0;
        off += sz;
        if (off <= TK_LABEL_MAX) keep = off;
    }
    return keep;
}

int tk_dec_set_body(const uint8_t *body, size_t blen, uint8_t count, size_t *nkeys) {
    size_t off = 0, k = 0;
    *nkeys = 0;
    if (blen > TK_SET_BODY_MAX || count < TK_SET_MIN || count > TK_SET_MAX) return 0;
    while (off < blen) {
        size_t kl = body[off];
        if (kl == 0 || kl > 250 || blen - off - 1 < kl) return 0;
        off += 1 + kl;
        k++;
    }
    if (k != count) return 0;
    *nkeys = k;
    return 1;
}

size_t tk_enc_resp(uint8_t *out, const tk_resp *r) {
    out[0] = r->status;
    out[1] = r->code;
    tk_put16(out + 2, r->queued);
    tk_put32(out + 4, r->req_id);
    int has = r->status == 'M' || r->status == 'E' || r->status == 'J';
    tk_put64(out + 8, has ? r->payload_len : r->value);
    if (has && r->payload_len) memcpy(out + TK_HDR, r->payload, r->payload_len);
    return TK_HDR + (has ? r->payload_len : 0);
}

int tk_dec_resp(const uint8_t *b, size_t len, tk_resp *o, size_t *used) {
    *used = TK_HDR;
    if (len < TK_HDR) return 0;
    uint8_t st = b[0];
    uint64_t v = tk_get64(b + 8);
    uint64_t max;
    switch (st) {
    case 'G': case 'T': case 'B': case 'O': case 'N': case 'U': case 'P': max = 0; break;
    case 'M': max = TK_MAX_MOVED; break;
    case 'E': max = TK_MAX_ERROR; break;
    case 'J': max = TK_MAX_ADMIN; break;
    default: return -1;
    }
    size_t plen = 0;
    if (max) {
        if (v > max) return -1;
        plen = (size_t)v;
    }
    *used = TK_HDR + plen;
    if (len < TK_HDR + plen) return 0;
    o->status = st;
    o->code = b[1];
    o->queued = tk_get16(b + 2);
    o->req_id = tk_get32(b + 4);
    o->value = v;
    o->payload = max ? b + TK_HDR : NULL;
    o->payload_len = (uint32_t)plen;
    return 1;
}

int tk_dec_hello(const uint8_t b[TK_HELLO_LEN], tk_hello *h) {
    if (b[0] == 'E' && b[1] != 0) { /* REJECT before HELLO: a TLS listener's hint (§12.4) */
        h->version = 0;
        h->flags = b[1];
        return -2;
    }
    if (memcmp(b, "TKTS", 4) != 0 || b[4] != 1) return -1;
    h->version = b[4];
    h->flags = b[5];
    memcpy(h->nonce, b + 8, 32);
    return 0;
}

int tk_dec_welcome(const uint8_t b[TK_WELCOME_LEN], tk_welcome *w) {
    if (b[0] != 'K' && b[0] != 'E') return -1;
    w->status = b[0];
    w->code = b[1];
    w->max_inflight = tk_get32(b + 4);
    memcpy(w->proof, b + 8, 32);
    return 0;
}

void tk_enc_auth(uint8_t out[TK_AUTH_LEN], uint8_t role, const uint8_t cn[32], const uint8_t proof[32]) {
    memcpy(out, "TKTC", 4);
    out[4] = 1;
    out[5] = role;
    out[6] = out[7] = 0;
    memcpy(out + 8, cn, 32);
    memcpy(out + 40, proof, 32);
}

void tk_proof(char which, const uint8_t *token, size_t tlen, uint8_t role, const uint8_t sn[32],
              const uint8_t cn[32], uint8_t out[32]) {
    uint8_t msg[19 + 1 + 64];
    memcpy(msg, which == 'c' ? "ticketing-v1-client" : "ticketing-v1-server", 19);
    msg[19] = role;
    memcpy(msg + 20, which == 'c' ? sn : cn, 32);
    memcpy(msg + 52, which == 'c' ? cn : sn, 32);
    unsigned int n = 32;
    static const uint8_t empty[1] = {0};
    HMAC(EVP_sha256(), tlen ? token : empty, (int)tlen, msg, sizeof msg, out, &n);
}

int tk_key_ok(const uint8_t *k, size_t n) {
    if (n == 0 || n > 250) return 0;
    for (size_t i = 0; i < n;) {
        uint8_t c = k[i];
        if (c < 0x80) {
            if (c < 0x20 || c == 0x7f) return 0;
            i++;
            continue;
        }
        uint32_t r;
        size_t sz;
        if (c >= 0xC2 && c <= 0xDF) {
            if (n - i < 2 || (k[i + 1] & 0xC0) != 0x80) return 0;
            r = ((uint32_t)(c & 0x1F) << 6) | (k[i + 1] & 0x3F);
            sz = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (n - i < 3 || (k[i + 1] & 0xC0) != 0x80 || (k[i + 2] & 0xC0) != 0x80) return 0;
            if (c == 0xE0 && k[i + 1] < 0xA0) return 0;
            if (c == 0xED && k[i + 1] >= 0xA0) return 0; /* surrogates */
            r = 0x800;
            sz = 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (n - i < 4 || (k[i + 1] & 0xC0) != 0x80 || (k[i + 2] & 0xC0) != 0x80 || (k[i + 3] & 0xC0) != 0x80)
                return 0;
            if (c == 0xF0 && k[i + 1] < 0x90) return 0;
            if (c == 0xF4 && k[i + 1] >= 0x90) return 0;
            r = 0x10000;
            sz = 4;
        } else {
            return 0;
        }
        if (r >= 0x80 && r <= 0x9f) return 0;
        i += sz;
    }
    return 1;
}
