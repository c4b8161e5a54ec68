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
size_t tk_enc_resp(uint8_t *out, const tk_resp *r); /* for tests and the fake server */

/* Decodes one response from buf: 1 = decoded (*used bytes), 0 = incomplete
 * (*used = bytes needed in total when known, else 16), -1 = protocol violation
 * (unknown status or an oversized payload). Never reads beyond len. */
int tk_dec_resp(const uint8_t *buf, size_t len, tk_resp *out, size_t *used);

int tk_dec_hello(const uint8_t b[TK_HELLO_LEN], tk_hello *h); /* 0 ok, -1 bad magic/version */
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
