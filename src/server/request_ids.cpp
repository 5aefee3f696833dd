#include "server/request_ids.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdint>

#include "core/check.h"

namespace rlm {

std::string new_request_id(std::string_view prefix) {
  uint8_t bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    RLM_CHECK(n > 0) << "getrandom failed (errno " << errno << ")";
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  for (uint8_t b : bytes) {
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  return id;
}

std::string RidAliases::namespace_of(const HttpRequest& request) {
  std::string ns = request.peer;
  ns += '\n';
  if (auto auth = request.headers.find("Authorization")) ns += *auth;
  return ns;
}

bool RidAliases::add(const std::string& ns, const std::string& alias, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  return ids_.emplace(std::make_pair(ns, alias), id).second;
}

void RidAliases::remove(const std::string& ns, const std::string& alias) {
  std::lock_guard<std::mutex> lock(mu_);
  ids_.erase(std::make_pair(ns, alias));
}

std::optional<std::string> RidAliases::resolve(const std::string& ns, const std::string& target) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = ids_.find(std::make_pair(ns, target)); it != ids_.end()) return it->second;
  const size_t dash = target.rfind('-');
  if (dash == std::string::npos || dash + 1 == target.size()) return std::nullopt;
  for (size_t i = dash + 1; i < target.size(); ++i) {
    if (target[i] < '0' || target[i] > '9') return std::nullopt;
  }
  auto it = ids_.find(std::make_pair(ns, target.substr(0, dash)));
  if (it == ids_.end()) return std::nullopt;
  return it->second + target.substr(dash);
}

size_t RidAliases::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ids_.size();
}

}  // namespace rlm
