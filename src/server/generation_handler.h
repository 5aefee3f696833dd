// POST /v1/completions, /v1/chat/completions and /generate: tokenizes, submits one sequence per
// prompt and choice, then answers from the request streams — as one JSON body once every choice
// has finished, or as Server-Sent Events while tokens arrive. Nothing here waits: each
// RequestStream's listener posts a pump of the request onto its HTTP exchange's executor, which
// takes the waiting events and writes them. A client that goes away (or cannot keep up with its
// stream) has its sequences aborted at once.
#pragma once

#include <memory>

#include "server/http_exchange.h"
#include "server/openai_protocol.h"
#include "server/request_ids.h"
#include "server/serving_engine.h"

namespace rlm {

class GenerationHandler {
 public:
  GenerationHandler(ServingEngine& engine, RidAliases& aliases);

  // Answers one request whose body has been parsed into `body`.
  void handle(const std::shared_ptr<HttpExchange>& exchange, ApiKind kind, const ojson& body);

 private:
  ServingEngine& engine_;
  RidAliases& aliases_;
};

}  // namespace rlm
