// Expected failures as values: a bad request, an unsupported config, KV pages exhausted.
// The server maps StatusCode to an HTTP status and an OpenAI-shaped JSON error.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "core/check.h"

namespace rlm {

enum class StatusCode {
  kOk,
  kInvalidArgument,   // 400
  kNotFound,          // 404
  kUnauthenticated,   // 401
  kUnavailable,       // 503 (queue full, shutting down)
  kResourceExhausted, // KV pool exhausted; caller may retry later
  kUnimplemented,     // unsupported feature/config
  kDataLoss,          // truncated / malformed file
  kInternal,
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status data_loss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// A value or a failed Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    RLM_CHECK(!status_.is_ok()) << "StatusOr constructed from an OK status without a value";
  }
  bool is_ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & {
    RLM_CHECK(is_ok()) << status_.to_string();
    return *value_;
  }
  const T& value() const& {
    RLM_CHECK(is_ok()) << status_.to_string();
    return *value_;
  }
  T&& value() && {
    RLM_CHECK(is_ok()) << status_.to_string();
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace rlm

// Returns from the enclosing function when `expr` (a Status) is not OK.
#define RLM_RETURN_IF_ERROR(expr)        \
  do {                                   \
    ::rlm::Status _rlm_st = (expr);      \
    if (!_rlm_st.is_ok()) return _rlm_st; \
  } while (0)

#define RLM_CONCAT_INNER_(a, b) a##b
#define RLM_CONCAT_(a, b) RLM_CONCAT_INNER_(a, b)
// `RLM_ASSIGN_OR_RETURN(auto x, make_x());`
#define RLM_ASSIGN_OR_RETURN(lhs, expr) RLM_ASSIGN_OR_RETURN_IMPL_(RLM_CONCAT_(_rlm_so_, __LINE__), lhs, expr)
#define RLM_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.is_ok()) return tmp.status();           \
  lhs = std::move(tmp).value()
