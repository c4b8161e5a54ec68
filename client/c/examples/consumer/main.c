/* The first example: take a lock, do the work, release. */
#include <stdio.h>
#include <ticketing.h>

int main(int argc, char **argv) {
    const char *addr = argc > 1 ? argv[1] : "127.0.0.1:7000";
    tk_config cfg = {0};
    cfg.addrs = &addr;
    cfg.n_addrs = 1;
    tk_client *c = tk_client_new(&cfg);
    if (!c) return 2;
    if (argc < 2) { /* built only: nothing to connect to */
        puts(tk_strerror(TK_OK));
        tk_client_free(c);
        return 0;
    }
    tk_lease l;
    tk_status st = tk_acquire(c, "orders/42", 9, 30000, 5000, &l);
    if (st != TK_OK) {
        fprintf(stderr, "acquire: %s (code %d)\n", tk_strerror(st), l.code);
        tk_client_free(c);
        return 1;
    }
    printf("token %llu, %lld ms left\n", (unsigned long long)l.token, (long long)tk_lease_remaining_ms(&l));
    st = tk_release(c, &l);
    tk_client_free(c);
    return st == TK_OK ? 0 : 1;
}
