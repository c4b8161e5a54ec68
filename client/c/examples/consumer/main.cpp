#include <iostream>
#include <ticketing.hpp>

int main(int argc, char **argv) {
    if (argc < 2) return 0;
    ticketing::Options o;
    o.addrs = {argv[1]};
    ticketing::Client client(o);
    auto lease = client.acquire("orders/42", std::chrono::seconds(30), std::chrono::seconds(5));
    std::cout << "token " << lease.token() << "\n";
    lease.release();
}
