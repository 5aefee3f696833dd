// The routes a router or gateway asks of a worker, as SGLang's model gateway (`sglang-router`) and
// `vllm-router` query them (the OpenAI routes, /generate, /health, /flush_cache and /abort_request
// are the API's own, routes.h):
//   GET /get_model_info, /model_info    the model: path, served name, is_generation, ...
//   GET /get_server_info                /server_info's limits plus the model and the version
//   GET /get_load                       [{dp_rank, num_reqs, num_waiting_reqs, num_tokens}] (one rank)
//   GET /health_generate                generates one token: 200 when the engine answers, 503 when draining
#pragma once

#include <string>
#include <vector>

#include "server/generation_handler.h"
#include "server/http_router.h"
#include "server/serving_engine.h"

namespace rlm {

// The /get_load entry of this server: requests running and waiting, and the KV tokens they hold
// (neither free nor evictable prefix cache).
ojson worker_load(ServingEngine& engine);

// Adds the routes above (protected by the API key like the API's). `model_names`: the served names,
// the reported one first. engine and generation must outlive the router's use.
void install_worker_routes(HttpRouter& router, ServingEngine& engine, GenerationHandler& generation,
                           const std::vector<std::string>& model_names);

}  // namespace rlm
