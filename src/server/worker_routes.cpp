#include "server/worker_routes.h"

namespace rlm {

namespace {

// The version routers log for a worker.
constexpr const char* kVersion = "radixlm";

ojson model_info(const ServingEngine& engine, const std::vector<std::string>& names) {
  return {{"model_path", engine.model_name()},
          {"tokenizer_path", engine.model_name()},
          {"served_model_name", names.front()},
          {"is_generation", true},
          {"preferred_sampling_params", nullptr},
          {"weight_version", "default"},
          {"has_image_understanding", false},
          {"has_audio_understanding", false},
          {"max_model_len", engine.max_context_len()}};
}

}  // namespace

ojson worker_load(ServingEngine& engine) {
  const SchedulerGauges g = engine.metrics().gauges();
  const int64_t evictable_pages = g.page_size > 0 ? g.cache_evictable / g.page_size : 0;
  const int64_t held_tokens = (g.kv_pages_total - g.kv_pages_free - evictable_pages) * g.page_size;
  return ojson::array({{{"dp_rank", 0},
                        {"num_reqs", g.running + g.queued},
                        {"num_waiting_reqs", g.queued},
                        {"num_tokens", held_tokens}}});
}

void install_worker_routes(HttpRouter& router, ServingEngine& engine, GenerationHandler& generation,
                           const std::vector<std::string>& model_names) {
  for (const char* path : {"/get_model_info", "/model_info"}) {
    router.add("GET", path, [&engine, model_names](const std::shared_ptr<HttpExchange>& ex) {
      ex->respond(json_response(200, model_info(engine, model_names)));
    });
  }
  router.add("GET", "/get_server_info", [&engine, model_names](const std::shared_ptr<HttpExchange>& ex) {
    ojson info = engine.server_info();
    info["model_path"] = engine.model_name();
    info["served_model_name"] = model_names.front();
    info["version"] = kVersion;
    info["dp_size"] = 1;
    info["tp_size"] = 1;
    info["load"] = worker_load(engine);
    ex->respond(json_response(200, info));
  });
  router.add("GET", "/get_load", [&engine](const std::shared_ptr<HttpExchange>& ex) {
    ex->respond(json_response(200, worker_load(engine)));
  });
  // One token from the first vocabulary id through the whole path (scheduler, model, sampler).
  router.add("GET", "/health_generate", [&engine, &generation](const std::shared_ptr<HttpExchange>& ex) {
    if (engine.draining()) return ex->respond(json_response(503, {{"status", "shutting down"}}));
    generation.handle(ex, ApiKind::kGenerate,
                      {{"input_ids", {0}}, {"sampling_params", {{"max_new_tokens", 1}, {"temperature", 0}}}});
  });
}

}  // namespace rlm
