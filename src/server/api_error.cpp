#include "server/api_error.h"

namespace rlm {

nlohmann::ordered_json ApiError::to_json() const {
  nlohmann::ordered_json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(param);
  e["code"] = http_status;
  nlohmann::ordered_json j;
  j["error"] = e;
  return j;
}

ApiError ApiError::from_status(const Status& st) {
  switch (st.code()) {
    case StatusCode::kInvalidArgument: return {400, st.message(), "invalid_request_error", ""};
    case StatusCode::kNotFound: return {404, st.message(), "not_found_error", ""};
    case StatusCode::kUnauthenticated: return {401, st.message(), "authentication_error", ""};
    case StatusCode::kUnavailable: return {503, st.message(), "service_unavailable", ""};
    case StatusCode::kResourceExhausted: return {503, st.message(), "service_unavailable", ""};
    case StatusCode::kUnimplemented: return {400, st.message(), "invalid_request_error", ""};
    default: return {500, st.message(), "internal_error", ""};
  }
}

}  // namespace rlm
