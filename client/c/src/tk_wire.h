/* Internal: the v1 wire codec (fixed offsets, big-endian). */
#ifndef TK_WIRE_H
#define TK_WIRE_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

#define TK_HDR 16
#define TK_HELLO_LEN 40
#define TK_AUTH_LEN 72
#define TK_WELCOME_LEN 40
#define TK_MAX_MOVED 255
#define TK_MAX_ERROR 1024
#define TK_MAX_ADMIN (16u << 20)

typedef struct tk_resp {
    uint8_t status, code;
    uint16_t queued;
    uint32_t req_id;
    uint64_t value;
    const uint8_t *payload; /* into the input buffer, payload_len bytes (M E J) */
    uint32_t payload_len;
} tk_resp;

typedef struct tk_hello {
    uint8_t version, flags;
    uint8_t nonce[32];
} tk_hello;

typedef struct tk_welcome {
    uint8_t status, code;
    uint32_t max_inflight;
    uint8_t proof[32];
} tk_welcome;

void tk_put16(uint8_t *p, uint16_t v);
void tk_put32(uint8_t *p, uint32_t v);
void tk_put64(uint8_t *p, uint64_t v);
uint16_t tk_get16(const uint8_t *p);
uint32_t tk_get32(const uint8_t *p);
uint64_t tk_get64(const uint8_t *p);

/* Encoders write into out (16 + key_len bytes) and return the length. */
size_t tk_enc_acquire(uint8_t *out, uint32_t req_id, const uint8_t *key, size_t klen, uint32_t lease_ms, uint32_t wait_ms);
size_t tk_enc_release(uint8_t *out, uint32_t req_id, const uint8_t *key, size_t klen, uint64_t token);
size_t tk_enc_cancel(uint8_t *out, uint32_t req_id, const uint8_t *key, size_t klen, uint32_t target);
size_t tk_enc_ping(uint8_t *out, uint32_t req_id);

/* Protocol 1.1 (protocol.md §12). */
#define TK_FEAT_KEY_SETS 0x0001
#define TK_FEAT_LABELS 0x0002
#define TK_FEAT_TLS_HINT 0x0004
#define TK_SET_MIN 2
#define TK_SET_MAX 16
#define TK_SET_BODY_MAX (TK_SET_MAX * (1 + 250)) /* 4,016 bytes */
#define TK_LABEL_MAX 64
/* The feature ping (§12.1): a P with arg 1; its pong carries the bits in queued. */
size_t tk_enc_ping_features(uint8_t *out, uint32_t req_id);
/* The body of S and X: n (2..16) distinct valid keys as key_len u8 || bytes.
 * Returns the body length, or 0 when the set is invalid (*why says which rule:
 * "count", "key", "duplicate"; *bad the index of the offending key). */
size_t tk_enc_set_body(uint8_t *out, const uint8_t *const *keys, const size_t *lens, size_t n, const char **why,
                       size_t *bad);
/* S / X frames: header + body (16 + blen bytes into out). */
size_t tk_enc_acquire_set(uint8_t *out, uint32_t req_id, uint8_t count, const uint8_t *body, size_t blen,
                          uint32_t lease_ms, uint32_t wait_ms);
size_t tk_enc_release_set(uint8_t *out, uint32_t req_id, uint8_t count, const uint8_t *body, size_t blen,
                          uint64_t token);
/* L (§12.3): label of at most 64 bytes (16 + len bytes into out). */
size_t tk_enc_label(uint8_t *out, uint32_t req_id, const uint8_t *label, size_t len);
/* The longest prefix of s (at most 64 bytes) that ends at a UTF-8 character
 * boundary; 0 when s is not a valid label (not UTF-8, a control character). */
size_t tk_label_cut(const uint8_t *s, size_t n);
/* Walks a set body: 1 and the number of keys when it is well formed (count
 * 2..16 entries of key_len 1..250, no byte left over), else 0. */
int tk_dec_set_body(const uint8_t *body, size_t blen, uint8_t count, size_t *nkeys);
size_t tk_enc_resp(uint8_t *out, const tk_resp *r); /* for tests and the fake server */

/* Decodes one response from buf: 1 = decoded (*used bytes), 0 = incomplete
 * (*used = bytes needed in total when known, else 16), -1 = protocol violation
 * (unknown status or an oversized payload). Never reads beyond len. */
int tk_dec_resp(const uint8_t *buf, size_t len, tk_resp *out, size_t *used);

/* 0 ok, -1 bad magic/version, -2 a REJECT where HELLO was expected
 * (§12.4: 'E' and a code; h->flags = the code, e.g. 12 TLS_REQUIRED). */
int tk_dec_hello(const uint8_t b[TK_HELLO_LEN], tk_hello *h);
int tk_dec_welcome(const uint8_t b[TK_WELCOME_LEN], tk_welcome *w);
void tk_enc_auth(uint8_t out[TK_AUTH_LEN], uint8_t role, const uint8_t cnonce[32], const uint8_t proof[32]);
/* proofs: which 'c' (client) or 's' (server). */
void tk_proof(char which, const uint8_t *token, size_t tlen, uint8_t role, const uint8_t snonce[32],
              const uint8_t cnonce[32], uint8_t out[32]);

int tk_key_ok(const uint8_t *k, size_t n);

#ifdef __cplusplus
}
#endif
#endif
