// Request ids. The server makes every id itself: a prefix and 128 bits from the operating system's
// random source, as 32 hex digits, so ids are unguessable and never collide. A client-chosen id
// (SGLang's /generate "rid") is only an alias: it lives in a namespace of the caller (its peer
// address and Authorization value), maps to a server id, and is visible to no other namespace, so
// a client can neither probe nor abort another client's request through it.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "server/http_exchange.h"

namespace rlm {

// prefix + 32 lowercase hex digits (getrandom(2)).
std::string new_request_id(std::string_view prefix);

class RidAliases {
 public:
  static constexpr size_t kMaxAliasLength = 256;

  // The caller namespace of a request: its peer address and Authorization header.
  static std::string namespace_of(const HttpRequest& request);

  // Maps `alias` to `id` in `ns`; false when the alias is live there already.
  bool add(const std::string& ns, const std::string& alias, const std::string& id);
  void remove(const std::string& ns, const std::string& alias);
  // The server id for `target` in `ns`: an alias's id, or for "<alias>-<i>" (one choice of a
  // multi-choice request) "<id>-<i>"; nullopt when `target` is no live alias there.
  std::optional<std::string> resolve(const std::string& ns, const std::string& target) const;
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, std::string> ids_;  // (namespace, alias) -> server id
};

}  // namespace rlm
