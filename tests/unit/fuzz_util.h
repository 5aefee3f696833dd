// Seeded input mutation for the parser fuzz tests: every test draws its inputs from one
// std::mt19937_64 whose seed it prints (RADIXLM_FUZZ_SEED overrides it, RADIXLM_FUZZ_ITERS the
// number of inputs), so a failure is reproduced by rerunning with the printed seed.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace rlm::fuzz {

inline uint64_t env_or(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 0) : fallback;
}

// The seed of a test (default: fixed per test, so CI runs are reproducible), printed once.
inline uint64_t seed(uint64_t fallback) {
  const uint64_t s = env_or("RADIXLM_FUZZ_SEED", fallback);
  std::printf("fuzz seed %llu (rerun with RADIXLM_FUZZ_SEED=%llu)\n", static_cast<unsigned long long>(s),
              static_cast<unsigned long long>(s));
  return s;
}

inline int iterations(int fallback) { return static_cast<int>(env_or("RADIXLM_FUZZ_ITERS", fallback)); }

// Byte-level and token-level edits of a valid input.
class Mutator {
 public:
  // `dictionary`: fragments worth splicing in (JSON punctuation, keywords, magic numbers).
  Mutator(uint64_t seed, std::vector<std::string> dictionary) : rng_(seed), dictionary_(std::move(dictionary)) {}

  std::mt19937_64& rng() { return rng_; }
  uint64_t below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

  // 1-4 random edits.
  std::string mutate(std::string s) {
    const int edits = 1 + static_cast<int>(below(4));
    for (int e = 0; e < edits; ++e) edit(s);
    return s;
  }

  // A little-endian integer of 1, 2, 4 or 8 bytes chosen to break length and count fields.
  std::string interesting_int() {
    static const uint64_t kValues[] = {0,          1,          2,          7,          8,          0x7f,
                                       0x80,       0xff,       0x100,      0x7fff,     0xffff,     0x7fffffff,
                                       0x80000000, 0xffffffff, 1ull << 32, 1ull << 40, 1ull << 62, 1ull << 63,
                                       ~0ull,      ~0ull - 7};
    const uint64_t v = kValues[below(std::size(kValues))];
    const size_t width = size_t{1} << below(4);
    std::string out(width, '\0');
    std::memcpy(out.data(), &v, width);
    return out;
  }

 private:
  void edit(std::string& s) {
    const size_t pos = s.empty() ? 0 : below(s.size() + 1);
    switch (below(8)) {
      case 0:  // flip a bit
        if (!s.empty()) s[below(s.size())] ^= static_cast<char>(1u << below(8));
        break;
      case 1:  // a random byte
        if (!s.empty()) s[below(s.size())] = static_cast<char>(below(256));
        break;
      case 2:  // delete a range
        if (!s.empty()) s.erase(below(s.size()), 1 + below(16));
        break;
      case 3:  // splice a dictionary fragment
        if (!dictionary_.empty()) s.insert(pos, dictionary_[below(dictionary_.size())]);
        break;
      case 4:  // overwrite with a dictionary fragment
        if (!dictionary_.empty() && !s.empty()) {
          const std::string& d = dictionary_[below(dictionary_.size())];
          s.replace(below(s.size()), d.size(), d);
        }
        break;
      case 5: {  // overwrite with an interesting integer
        const std::string v = interesting_int();
        if (s.size() >= v.size()) s.replace(below(s.size() - v.size() + 1), v.size(), v);
        break;
      }
      case 6: {  // duplicate a range
        if (s.empty()) break;
        const size_t a = below(s.size()), n = 1 + below(std::min<size_t>(64, s.size() - a));
        s.insert(pos, s.substr(a, n));
        break;
      }
      default:  // truncate
        s.resize(below(s.size() + 1));
        break;
    }
  }

  std::mt19937_64 rng_;
  std::vector<std::string> dictionary_;
};

// JSON fragments: punctuation, keywords, extreme numbers, escapes, invalid UTF-8.
inline std::vector<std::string> json_dictionary() {
  return {"{",     "}",          "[",        "]",         ",",         ":",           "\"",          "\\",
          "null",  "true",       "false",    "0",         "-1",        "1e999",       "-1e999",      "1.5",
          "-0",    "9223372036854775808",   "18446744073709551616", "1e-400",      "\\u0000",     "\\ud800",
          "\\uDFFF\\uD800", "\xff",  "\xc3",    "\xed\xa0\x80", "\xf4\x90\x80\x80", "[[[[[[[[",  "]]]]",
          "{\"a\":", "\"\":", "[]",  "{}",        " ",         "\n",          "\t",          "NaN",
          "Infinity", "\"x\"",  std::string(300, '['), std::string(40, '9')};
}

// Measures the slowest single input, to catch near-hangs (ctest's timeout catches real ones).
class SlowestInput {
 public:
  template <typename F>
  void run(F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    slowest_s_ = std::max(slowest_s_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  double seconds() const { return slowest_s_; }

 private:
  double slowest_s_ = 0.0;
};

}  // namespace rlm::fuzz
