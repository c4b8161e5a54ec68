/* libFuzzer target: the response decoder must never read out of bounds,
 * crash, or accept a payload larger than its status allows; the protocol 1.1
 * decoders (protocol.md §12) likewise: the REJECT where HELLO belongs, the
 * feature pong, a key set's body (which must re-encode to the same bytes)
 * and the label cut (a prefix of at most 64 bytes that is itself a label). */
#include <string.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "tk_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t off = 0;
    while (off < size) {
        tk_resp r;
        size_t used = 0;
        int d = tk_dec_resp(data + off, size - off, &r, &used);
        if (d <= 0) break;
        if (used < TK_HDR || used > size - off) abort();
        if (r.payload_len > TK_MAX_ADMIN) abort();
        if (r.status == 'M' && r.payload_len > TK_MAX_MOVED) abort();
        if (r.status == 'E' && r.payload_len > TK_MAX_ERROR) abort();
        uint8_t out[TK_HDR + TK_MAX_ERROR + 1];
        if (r.status != 'J') {
            size_t n = tk_enc_resp(out, &r);
            if (n != used) abort();
            for (size_t i = 0; i < n; i++)
                if (out[i] != data[off + i]) abort();
        }
        off += used;
    }
    if (size >= TK_WELCOME_LEN) {
        tk_welcome w;
        tk_hello h;
        (void)tk_dec_welcome(data, &w);
        int hd = tk_dec_hello(data, &h);
        if (hd == -2 && (data[0] != 'E' || h.flags != data[1])) abort();
    }
    (void)tk_key_ok(data, size);
    if (size >= 1) { /* a set body: count = the first byte */
        size_t n = 0;
        if (tk_dec_set_body(data + 1, size - 1, data[0], &n)) {
            if (n != data[0] || n < TK_SET_MIN || n > TK_SET_MAX || size - 1 > TK_SET_BODY_MAX) abort();
            const uint8_t *keys[TK_SET_MAX];
            size_t lens[TK_SET_MAX];
            for (size_t off = 1, i = 0; i < n; i++) {
                lens[i] = data[off];
                keys[i] = data + off + 1;
                off += 1 + lens[i];
            }
            static uint8_t body[TK_SET_BODY_MAX];
            const char *why;
            size_t bad;
            size_t bl = tk_enc_set_body(body, keys, lens, n, &why, &bad); /* 0: a key invalid or twice */
            if (bl && (bl != size - 1 || memcmp(body, data + 1, bl) != 0)) abort();
        }
    }
    size_t cut = tk_label_cut(data, size);
    if (cut > TK_LABEL_MAX || cut > size) abort();
    if (cut && tk_label_cut(data, cut) != cut) abort();
    return 0;
}
