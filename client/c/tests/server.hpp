// Starts the real server ($TICKETING_BIN serve) for the integration tests.
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

namespace {
struct Server {
    pid_t pid = -1;
    std::string addr;
    std::string log;
    explicit Server(const std::string &token = "") {
        const char *bin = getenv("TICKETING_BIN");
        if (!bin || access(bin, X_OK) != 0) return;
        char tmpl[] = "/tmp/tkc-srv-XXXXXX";
        int fd = mkstemp(tmpl);
        log = tmpl;
        std::string tf;
        if (!token.empty()) {
            tf = log + ".token";
            std::ofstream(tf) << token;
        }
        pid = fork();
        if (pid == 0) {
            dup2(fd, 2);
            if (tf.empty()) execl(bin, bin, "serve", "--listen", "127.0.0.1:0", (char *)nullptr);
            else execl(bin, bin, "serve", "--listen", "127.0.0.1:0", "--token-file", tf.c_str(), (char *)nullptr);
            _exit(127);
        }
        close(fd);
        for (int i = 0; i < 200 && addr.empty(); i++) {
            std::ifstream f(log);
            std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
            auto p = s.find("msg=serving addr=");
            auto e = p == std::string::npos ? p : s.find_first_of(" \n", p + 17);
            if (e != std::string::npos) addr = s.substr(p + 17, e - p - 17);
            else std::this_thread::sleep_for(std::chrono::milliseconds(25));
        }
    }
    ~Server() {
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, nullptr, 0);
        }
        if (!log.empty()) {
            unlink(log.c_str());
            unlink((log + ".token").c_str());
        }
    }
};
using ms = std::chrono::milliseconds;
} // namespace

#define NEED_SERVER(s)                                                  \
    if ((s).addr.empty()) GTEST_SKIP() << "TICKETING_BIN not runnable"
