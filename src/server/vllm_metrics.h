// /metrics under vLLM's names, beside radixlm's own, for the tools that read vLLM's: endpoint
// pickers (llm-d, the Gateway API Inference Extension), vLLM dashboards, routers' load probes.
#pragma once

#include <string>

#include "scheduler/metrics.h"

namespace rlm {

// The `vllm:*` families in Prometheus text format, every sample labelled
// `model_name="<model_name>",engine="0"` as vLLM v1 labels them (one engine per server):
//   gauges   vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc (0..1:
//            KV held by requests, i.e. neither free nor evictable prefix cache, as vLLM counts its
//            free block queue);
//   counters vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total (prompt tokens looked up
//            in / served from the prefix cache), vllm:prompt_tokens_total,
//            vllm:generation_tokens_total, vllm:num_preemptions_total,
//            vllm:request_success_total{finished_reason="stop"|"length"|"abort"};
//   histograms vllm:time_to_first_token_seconds, vllm:inter_token_latency_seconds (also under its
//            older name vllm:time_per_output_token_seconds), vllm:e2e_request_latency_seconds,
//            with vLLM's bucket bounds.
std::string render_vllm_metrics(const ServingMetrics& metrics, const std::string& model_name);

}  // namespace rlm
