// Always-on invariant checks (RLM_CHECK) that throw rlm::Error with file, line, operands and
// a streamed message. Expected failures use rlm::Status instead (status.h).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace rlm {

// Thrown by RLM_CHECK and by code that meets an unrecoverable condition. The server catches it
// per request so that one failing request never takes the process down.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {

// Collects the streamed message and throws from its destructor (the RLM_CHECK idiom).
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* cond) {
    stream_ << file << ":" << line << ": check failed: " << cond;
  }
  CheckFailure(const CheckFailure&) = delete;
  CheckFailure& operator=(const CheckFailure&) = delete;
  ~CheckFailure() noexcept(false) { throw Error(stream_.str()); }
  template <typename T>
  CheckFailure& operator<<(const T& v) {
    if (!has_message_) {
      stream_ << ": ";
      has_message_ = true;
    }
    stream_ << v;
    return *this;
  }
  std::ostringstream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
  bool has_message_ = false;
};

// Lets `RLM_CHECK(x) << ...` compile as a void expression in the ternary below.
struct Voidify {
  template <typename T>
  void operator&(T&&) {}
};

template <typename A, typename B>
std::string format_operands(const A& a, const B& b) {
  std::ostringstream os;
  os << " (" << a << " vs " << b << ")";
  return os.str();
}

}  // namespace detail

// Concatenates anything streamable into a string: rlm::str("shape ", n, " != ", m).
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// Throws rlm::Error with the given message; for unreachable branches and fatal conditions.
[[noreturn]] inline void fail(const std::string& message) { throw Error(message); }

}  // namespace rlm

#define RLM_CHECK(cond) \
  (cond) ? (void)0 : ::rlm::detail::Voidify() & ::rlm::detail::CheckFailure(__FILE__, __LINE__, #cond)

#define RLM_CHECK_OP_(a, b, op)                                                              \
  ((a)op(b)) ? (void)0                                                                       \
             : ::rlm::detail::Voidify() &                                                    \
                   (::rlm::detail::CheckFailure(__FILE__, __LINE__, #a " " #op " " #b)       \
                    << ::rlm::detail::format_operands((a), (b)))

#define RLM_CHECK_EQ(a, b) RLM_CHECK_OP_(a, b, ==)
#define RLM_CHECK_NE(a, b) RLM_CHECK_OP_(a, b, !=)
#define RLM_CHECK_LT(a, b) RLM_CHECK_OP_(a, b, <)
#define RLM_CHECK_LE(a, b) RLM_CHECK_OP_(a, b, <=)
#define RLM_CHECK_GT(a, b) RLM_CHECK_OP_(a, b, >)
#define RLM_CHECK_GE(a, b) RLM_CHECK_OP_(a, b, >=)

#ifndef NDEBUG
#define RLM_DCHECK(cond) RLM_CHECK(cond)
#else
#define RLM_DCHECK(cond) \
  true ? (void)0 : ::rlm::detail::Voidify() & ::rlm::detail::CheckFailure(__FILE__, __LINE__, #cond)
#endif

// Throws rlm::Error with a streamed message, e.g. RLM_FAIL() << "unknown dtype " << name;
#define RLM_FAIL() ::rlm::detail::Voidify() & ::rlm::detail::CheckFailure(__FILE__, __LINE__, "failure")
