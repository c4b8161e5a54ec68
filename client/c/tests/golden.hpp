#pragma once
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
#include <cstdint>
#include <cctype>
#include <stdexcept>

inline std::vector<uint8_t> golden(const std::string &name) {
    std::ifstream f(std::string(TK_GOLDEN_DIR) + "/" + name);
    if (!f) throw std::runtime_error("missing golden file " + name);
    std::string line, hex;
    while (std::getline(f, line)) {
        auto h = line.find('#');
        if (h != std::string::npos) line.resize(h);
        for (char c : line)
            if (!isspace((unsigned char)c)) hex += c;
    }
    std::vector<uint8_t> out;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back((uint8_t)std::stoul(hex.substr(i, 2), nullptr, 16));
    return out;
}
