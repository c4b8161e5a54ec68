// Golden vectors (client/wire/testdata/golden, read directly) through the codec.
#include <gtest/gtest.h>

#include <cstring>

#include "golden.hpp"
#include "ticketing.h"
#include "tk_wire.h"

namespace {
const std::vector<uint8_t> kKey = {'o', 'r', 'd', 'e', 'r', 's', '/', '4', '2'};
const uint8_t kTok[] = {'s', '3', 'c', 'r', 'e', 't'};
void nonces(uint8_t sn[32], uint8_t cn[32]) {
    for (int i = 0; i < 32; i++) {
        sn[i] = (uint8_t)i;
        cn[i] = (uint8_t)(0x20 + i);
    }
}
std::vector<uint8_t> buf(const uint8_t *p, size_t n) { return std::vector<uint8_t>(p, p + n); }
} // namespace

TEST(Golden, Requests) {
    uint8_t b[300];
    EXPECT_EQ(buf(b, tk_enc_acquire(b, 1, kKey.data(), kKey.size(), 30000, 5000)), golden("req_acquire.hex"));
    EXPECT_EQ(buf(b, tk_enc_acquire(b, 2, (const uint8_t *)"job", 3, 3600000, 0)), golden("req_acquire_try.hex"));
    const char *k = "cl\xc3\xa9/\xf0\x9f\x94\x92";
    EXPECT_EQ(buf(b, tk_enc_acquire(b, 0xcafebabe, (const uint8_t *)k, strlen(k), 1000, 900000)), golden("req_acquire_utf8.hex"));
    EXPECT_EQ(buf(b, tk_enc_release(b, 3, kKey.data(), kKey.size(), 0x18bcfe5680000005ull)), golden("req_release.hex"));
    EXPECT_EQ(buf(b, tk_enc_cancel(b, 4, kKey.data(), kKey.size(), 1)), golden("req_cancel.hex"));
    EXPECT_EQ(buf(b, tk_enc_ping(b, 5)), golden("req_ping.hex"));
    auto q = golden("req_query.hex"); // the client sends no Q; check its header fields
    EXPECT_EQ(q[0], 'Q');
    EXPECT_EQ(tk_get32(&q[4]), 6u);
    EXPECT_EQ(tk_get32(&q[8]), 16u);
    EXPECT_EQ(q.size(), 32u);
}

struct RespCase {
    const char *file;
    uint8_t status, code;
    uint16_t queued;
    uint32_t req_id;
    uint64_t value;
    const char *payload;
};

// One response vector: decoded field by field, every prefix incomplete, re-encoded byte for byte.
void check_resp(const RespCase &c) {
    SCOPED_TRACE(c.file);
    auto g = golden(c.file);
    tk_resp r;
    size_t used = 0;
    ASSERT_EQ(tk_dec_resp(g.data(), g.size(), &r, &used), 1);
    EXPECT_EQ(used, g.size());
    EXPECT_EQ(r.status, c.status);
    EXPECT_EQ(r.code, c.code);
    EXPECT_EQ(r.queued, c.queued);
    EXPECT_EQ(r.req_id, c.req_id);
    EXPECT_EQ(r.value, c.value);
    if (c.payload) EXPECT_EQ(std::string((const char *)r.payload, r.payload_len), c.payload);
    else EXPECT_EQ(r.payload_len, 0u);
    // every prefix is incomplete, never an error
    for (size_t n = 0; n < g.size(); n++) EXPECT_EQ(tk_dec_resp(g.data(), n, &r, &used), 0);
    // re-encode byte for byte
    tk_resp e{c.status, c.code, c.queued, c.req_id, c.value, (const uint8_t *)c.payload,
              c.payload ? (uint32_t)strlen(c.payload) : 0};
    std::vector<uint8_t> out(16 + 64);
    EXPECT_EQ(buf(out.data(), tk_enc_resp(out.data(), &e)), g);
}

TEST(Golden, Responses) {
    const RespCase cases[] = {
        {"resp_granted.hex", 'G', 0, 0, 1, 0x18bcfe5680000001ull, nullptr},
        {"resp_granted_queued.hex", 'G', 0, 625, 0xcafebabe, 0x18bcfe5680000007ull, nullptr},
        {"resp_timeout.hex", 'T', 0, 0, 2, 0, nullptr},
        {"resp_busy_queue_full.hex", 'B', 1, 0, 7, 0, nullptr},
        {"resp_busy_overloaded.hex", 'B', 2, 0, 8, 0, nullptr},
        {"resp_busy_clock_unhealthy.hex", 'B', 3, 0, 9, 0, nullptr},
        {"resp_busy_shutting_down.hex", 'B', 4, 0, 10, 0, nullptr},
        {"resp_busy_no_quorum.hex", 'B', 5, 0, 11, 0, nullptr},
        {"resp_released.hex", 'O', 0, 0, 3, 0, nullptr},
        {"resp_not_holder.hex", 'N', 0, 0, 4, 0, nullptr},
        {"resp_unknown.hex", 'U', 0, 0, 12, 0, nullptr},
        {"resp_unknown_no_quorum.hex", 'U', 5, 0, 13, 0, nullptr},
        {"resp_pong.hex", 'P', 0, 0, 5, 1700000000123456ull, nullptr},
        {"resp_moved.hex", 'M', 0, 0, 1, 13, "10.0.0.2:7001"},
        {"resp_moved_empty.hex", 'M', 0, 0, 2, 0, ""},
        {"resp_error.hex", 'E', 21, 0, 14, 22, "key is not valid UTF-8"},
        {"resp_error_empty.hex", 'E', 27, 0, 6, 0, ""},
        {"resp_admin.hex", 'J', 0, 0, 6, 28, "{\"unix_us\":1700000000123456}"},
    };
    for (const auto &c : cases) check_resp(c);
}

TEST(Golden, Handshake) {
    uint8_t sn[32], cn[32], proof[32], out[72];
    nonces(sn, cn);
    for (const char *f : {"hello_flags0.hex", "hello_flags1.hex"}) {
        auto g = golden(f);
        ASSERT_EQ(g.size(), 40u);
        tk_hello h;
        ASSERT_EQ(tk_dec_hello(g.data(), &h), 0);
        EXPECT_EQ(h.flags, f[11] == '1' ? 1 : 0);
        EXPECT_EQ(memcmp(h.nonce, sn, 32), 0);
    }
    struct A {
        const char *file;
        uint8_t role;
        bool token;
    } auths[] = {{"auth_client.hex", 1, true}, {"auth_admin.hex", 2, true}, {"auth_peer.hex", 3, true}, {"auth_client_notoken.hex", 1, false}};
    for (auto &a : auths) {
        SCOPED_TRACE(a.file);
        tk_proof('c', kTok, a.token ? sizeof kTok : 0, a.role, sn, cn, proof);
        tk_enc_auth(out, a.role, cn, proof);
        EXPECT_EQ(buf(out, 72), golden(a.file));
    }
    struct W {
        const char *file;
        uint8_t role;
        bool token;
        uint32_t mi;
    } ws[] = {{"welcome_client.hex", 1, true, 1024}, {"welcome_admin.hex", 2, true, 1024}, {"welcome_peer.hex", 3, true, 1}, {"welcome_client_notoken.hex", 1, false, 1024}};
    for (auto &w : ws) {
        SCOPED_TRACE(w.file);
        auto g = golden(w.file);
        tk_welcome d;
        ASSERT_EQ(tk_dec_welcome(g.data(), &d), 0);
        EXPECT_EQ(d.status, 'K');
        EXPECT_EQ(d.max_inflight, w.mi);
        tk_proof('s', kTok, w.token ? sizeof kTok : 0, w.role, sn, cn, proof);
        EXPECT_EQ(memcmp(proof, d.proof, 32), 0);
    }
    struct R {
        const char *file;
        uint8_t code;
    } rs[] = {{"reject_auth_failed.hex", 11}, {"reject_bad_handshake.hex", 10}, {"reject_overloaded.hex", 2}, {"reject_shutting_down.hex", 4}};
    for (auto &r : rs) {
        auto g = golden(r.file);
        tk_welcome d;
        ASSERT_EQ(tk_dec_welcome(g.data(), &d), 0);
        EXPECT_EQ(d.status, 'E');
        EXPECT_EQ(d.code, r.code);
        EXPECT_EQ(d.max_inflight, 0u);
    }
}

TEST(Decoder, RejectsBadFrames) {
    uint8_t b[32] = {'X'};
    tk_resp r;
    size_t used;
    EXPECT_EQ(tk_dec_resp(b, 16, &r, &used), -1);
    uint8_t m[16] = {'M'};
    tk_put64(m + 8, 256); // moved payload over 255
    EXPECT_EQ(tk_dec_resp(m, 16, &r, &used), -1);
    uint8_t e[16] = {'E'};
    tk_put64(e + 8, 1025);
    EXPECT_EQ(tk_dec_resp(e, 16, &r, &used), -1);
    uint8_t j[16] = {'J'};
    tk_put64(j + 8, (16u << 20) + 1);
    EXPECT_EQ(tk_dec_resp(j, 16, &r, &used), -1);
}

TEST(Keys, Validation) {
    EXPECT_TRUE(tk_key_ok((const uint8_t *)"orders/42", 9));
    EXPECT_FALSE(tk_key_ok((const uint8_t *)"", 0));
    std::string k251(251, 'a');
    EXPECT_FALSE(tk_key_ok((const uint8_t *)k251.data(), k251.size()));
    EXPECT_TRUE(tk_key_ok((const uint8_t *)k251.data(), 250));
    EXPECT_FALSE(tk_key_ok((const uint8_t *)"a\nb", 3));
    EXPECT_FALSE(tk_key_ok((const uint8_t *)"a\x7f", 2));
    EXPECT_FALSE(tk_key_ok((const uint8_t *)"\xc2\x85", 2));     // U+0085 control
    EXPECT_FALSE(tk_key_ok((const uint8_t *)"\xc0\xaf", 2));     // overlong
    EXPECT_FALSE(tk_key_ok((const uint8_t *)"\xed\xa0\x80", 3)); // surrogate
    EXPECT_FALSE(tk_key_ok((const uint8_t *)"\xff", 1));
    EXPECT_TRUE(tk_key_ok((const uint8_t *)"cl\xc3\xa9/\xf0\x9f\x94\x92", 9));
}

// Protocol 1.1 (protocol.md §12): every vector of golden/v1_1 through the codec.
namespace {
std::vector<uint8_t> body_of(const std::vector<std::string> &keys) {
    std::vector<const uint8_t *> k;
    std::vector<size_t> l;
    for (auto &x : keys) {
        k.push_back((const uint8_t *)x.data());
        l.push_back(x.size());
    }
    std::vector<uint8_t> b(TK_SET_BODY_MAX);
    const char *why = nullptr;
    size_t bad = 0;
    b.resize(tk_enc_set_body(b.data(), k.data(), l.data(), k.size(), &why, &bad));
    return b;
}
} // namespace

TEST(Golden11, Requests) {
    uint8_t b[TK_HDR + TK_SET_BODY_MAX];
    EXPECT_EQ(buf(b, tk_enc_ping_features(b, 9)), golden("v1_1/req_ping_features.hex"));
    auto two = body_of({"acct/17", "acct/42"});
    EXPECT_EQ(buf(b, tk_enc_acquire_set(b, 0x0a, 2, two.data(), two.size(), 30000, 5000)), golden("v1_1/req_acquire_set.hex"));
    auto three = body_of({"jobs", "tables", "queue1"});
    EXPECT_EQ(buf(b, tk_enc_acquire_set(b, 0x10, 3, three.data(), three.size(), 10000, 0)),
              golden("v1_1/req_acquire_set_try.hex"));
    EXPECT_EQ(buf(b, tk_enc_release_set(b, 0x0b, 2, two.data(), two.size(), 0x18bcfe5680000009ull)),
              golden("v1_1/req_release_set.hex"));
    // a queued set is withdrawn by C naming its first key
    EXPECT_EQ(buf(b, tk_enc_cancel(b, 0x0c, (const uint8_t *)"acct/17", 7, 0x0a)), golden("v1_1/req_cancel_set.hex"));
    const char *l = "web-1/4242 go/1.1.0";
    EXPECT_EQ(buf(b, tk_enc_label(b, 0x0d, (const uint8_t *)l, strlen(l))), golden("v1_1/req_label.hex"));
}

TEST(Golden11, Responses) {
    const RespCase cases[] = {
        {"v1_1/resp_pong_features.hex", 'P', 0, 7, 9, 1700000000123456ull, nullptr},
        {"v1_1/resp_label_ok.hex", 'O', 0, 0, 0x0d, 0, nullptr},
        {"v1_1/resp_error_bad_keyset.hex", 'E', TK_CODE_BAD_KEYSET, 0, 0x0a, 20, "duplicate key in set"},
        {"v1_1/resp_error_bad_label.hex", 'E', TK_CODE_BAD_LABEL, 0, 0x0d, 0, ""},
    };
    for (const auto &c : cases) check_resp(c);
}

TEST(Golden11, RejectTlsRequiredWhereHelloBelongs) {
    auto g = golden("v1_1/reject_tls_required.hex");
    ASSERT_EQ(g.size(), (size_t)TK_HELLO_LEN);
    tk_hello h;
    EXPECT_EQ(tk_dec_hello(g.data(), &h), -2);
    EXPECT_EQ(h.flags, TK_CODE_TLS_REQUIRED);
    auto hello = golden("hello_flags1.hex");
    EXPECT_EQ(tk_dec_hello(hello.data(), &h), 0); // a HELLO is still a HELLO
}

TEST(Sets, BodyRulesAndWalk) {
    EXPECT_TRUE(body_of({"a"}).empty());                  // count 2..16
    EXPECT_TRUE(body_of({"a", "a"}).empty());             // distinct
    EXPECT_TRUE(body_of({"a", ""}).empty());              // each key valid
    EXPECT_TRUE(body_of(std::vector<std::string>(17, "k")).empty());
    std::vector<std::string> sixteen;
    for (int i = 0; i < 16; i++) sixteen.push_back(std::string(250, (char)('a' + i)));
    auto big = body_of(sixteen);
    EXPECT_EQ(big.size(), (size_t)TK_SET_BODY_MAX);
    size_t n = 0;
    EXPECT_EQ(tk_dec_set_body(big.data(), big.size(), 16, &n), 1);
    EXPECT_EQ(n, 16u);
    EXPECT_EQ(tk_dec_set_body(big.data(), big.size(), 15, &n), 0); // count disagrees
    EXPECT_EQ(tk_dec_set_body(big.data(), big.size() - 1, 16, &n), 0); // truncated key
    EXPECT_EQ(tk_dec_set_body(big.data(), 0, 0, &n), 0);               // count 0 (a fuzz find)
    EXPECT_EQ(tk_dec_set_body(big.data(), 251, 1, &n), 0);             // count 1: not a set
    const char *why = nullptr;
    size_t bad = 9;
    const uint8_t *k[] = {(const uint8_t *)"x", (const uint8_t *)"x"};
    size_t l[] = {1, 1};
    uint8_t b[16];
    EXPECT_EQ(tk_enc_set_body(b, k, l, 2, &why, &bad), 0u);
    EXPECT_STREQ(why, "duplicate");
    EXPECT_EQ(bad, 1u);
}

TEST(Labels, CutAtACharacterBoundary) {
    std::string ascii(70, 'a');
    EXPECT_EQ(tk_label_cut((const uint8_t *)ascii.data(), ascii.size()), 64u);
    std::string e(63, 'a');
    e += "\xc3\xa9"; // the 2-byte character would end at 65: cut before it
    EXPECT_EQ(tk_label_cut((const uint8_t *)e.data(), e.size()), 63u);
    EXPECT_EQ(tk_label_cut((const uint8_t *)"web-1/4242 c/0.2.0", 18), 18u);
    EXPECT_EQ(tk_label_cut((const uint8_t *)"a\nb", 3), 0u);    // control character: no label
    EXPECT_EQ(tk_label_cut((const uint8_t *)"a\xff", 2), 0u);   // not UTF-8
    EXPECT_EQ(tk_label_cut((const uint8_t *)"", 0), 0u);
}
