// Errors as the OpenAI API shapes them: {"error": {"message", "type", "param", "code"}} with the
// matching HTTP status.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace rlm {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";  // or "authentication_error", "not_found_error", ...
  std::string param;                            // the offending field, "" when none

  nlohmann::ordered_json to_json() const;
  static ApiError bad_request(std::string message, std::string param = "") {
    return {400, std::move(message), "invalid_request_error", std::move(param)};
  }
  // Maps an engine Status to an HTTP error (invalid_argument 400, not_found 404, ...).
  static ApiError from_status(const Status& st);
};

}  // namespace rlm
