/* libFuzzer target: the response decoder must never read out of bounds,
 * crash, or accept a payload larger than its status allows. */
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
        (void)tk_dec_hello(data, &h);
    }
    (void)tk_key_ok(data, size);
    return 0;
}
