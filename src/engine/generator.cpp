#include "engine/generator.h"

#include <algorithm>

namespace rlm {

struct Generator::Active {
  size_t index = 0;  // into the request list
  int32_t req_slot = -1;
  int32_t mamba_slot = -1;  // hybrid models: the request's recurrent state (MambaPool slot)
  std::vector<int32_t> pages;
  int64_t seq_len = 0;   // tokens whose K/V are in the cache
  int32_t last_token = 0;
  bool done = false;
};

Generator::Generator(ModelRunner& runner) : runner_(runner), pages_(static_cast<int32_t>(runner.kv_pool().config().num_pages)) {}

Status Generator::validate(const GenerateRequest& r) const {
  const ModelConfig& c = runner_.model_config();
  if (r.prompt_ids.empty()) return invalid_argument("the prompt is empty");
  for (int32_t id : r.prompt_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return invalid_argument(str("prompt token id ", id, " is outside the vocabulary [0, ", c.vocab_size, ")"));
    }
  }
  if (r.max_tokens < 1) return invalid_argument(str("max_tokens must be at least 1, got ", r.max_tokens));
  const int64_t need = static_cast<int64_t>(r.prompt_ids.size()) + r.max_tokens;
  if (need > runner_.req_to_token().max_context_len()) {
    return invalid_argument(str("prompt (", r.prompt_ids.size(), " tokens) + max_tokens (", r.max_tokens,
                                ") exceeds the context length ", runner_.req_to_token().max_context_len()));
  }
  const int64_t page = runner_.kv_pool().page_size();
  if ((need + page - 1) / page > pages_.num_total()) {
    return invalid_argument(str("prompt + max_tokens needs ", need, " KV slots but the pool holds ",
                                pages_.num_total() * page));
  }
  return Status::ok();
}

bool Generator::grow(Active& a, int64_t to, std::vector<int32_t>& slots) {
  const int64_t page = runner_.kv_pool().page_size();
  const int64_t pages_needed = (to + page - 1) / page - static_cast<int64_t>(a.pages.size());
  if (pages_needed > 0) {
    auto got = pages_.alloc(static_cast<int32_t>(pages_needed));
    if (!got) return false;
    a.pages.insert(a.pages.end(), got->begin(), got->end());
  }
  slots.clear();
  for (int64_t pos = a.seq_len; pos < to; ++pos) {
    slots.push_back(static_cast<int32_t>(a.pages[pos / page] * page + pos % page));
  }
  return true;
}

int64_t Generator::free_mamba_slots() const {
  const MambaPool* pool = runner_.mamba_pool();
  return pool != nullptr ? pool->num_free() : 0;
}

bool Generator::admit(Active& a) {
  a.req_slot = runner_.req_to_token().alloc();
  if (a.req_slot < 0) return false;
  if (MambaPool* pool = runner_.mamba_pool()) {
    a.mamba_slot = pool->alloc();
    if (a.mamba_slot < 0) {
      release(a);
      return false;
    }
  }
  return true;
}

void Generator::release(Active& a) {
  if (!a.pages.empty()) pages_.free(a.pages);
  a.pages.clear();
  if (a.req_slot >= 0) runner_.req_to_token().free(a.req_slot);
  a.req_slot = -1;
  if (a.mamba_slot >= 0) runner_.mamba_pool()->free(a.mamba_slot);
  a.mamba_slot = -1;
}

StatusOr<Tensor> Generator::prompt_logits(const std::vector<int32_t>& prompt_ids) {
  GenerateRequest r;
  r.prompt_ids = prompt_ids;
  r.max_tokens = 1;
  RLM_RETURN_IF_ERROR(validate(r));
  Active a;
  if (!admit(a)) return Status(StatusCode::kResourceExhausted, "no free request (or recurrent-state) slot");
  BatchEntry e;
  e.req_slot = a.req_slot;
  e.mamba_slot = a.mamba_slot;
  e.new_ids = prompt_ids;
  e.all_logits = true;
  if (!grow(a, static_cast<int64_t>(prompt_ids.size()), e.new_slots)) {
    release(a);
    return Status(StatusCode::kResourceExhausted, "KV pool exhausted");
  }
  ForwardBatch batch = runner_.build_batch(ForwardMode::kExtend, {e});
  Tensor logits = runner_.forward(batch);
  release(a);
  return logits;
}

Status Generator::run_group(const std::vector<GenerateRequest>& requests, size_t begin, size_t end,
                            std::vector<GenerateOutput>& outputs) {
  const ModelConfig& c = runner_.model_config();
  std::vector<Active> active(end - begin);
  auto release_all = [&] {
    for (Active& a : active) release(a);
  };
  // Prefill every prompt of the group in one extend step.
  std::vector<BatchEntry> entries;
  for (size_t i = begin; i < end; ++i) {
    Active& a = active[i - begin];
    a.index = i;
    BatchEntry e;
    if (!admit(a) || !grow(a, static_cast<int64_t>(requests[i].prompt_ids.size()), e.new_slots)) {
      release_all();
      return Status(StatusCode::kResourceExhausted, "KV pool, request or recurrent-state slots exhausted during prefill");
    }
    e.req_slot = a.req_slot;
    e.mamba_slot = a.mamba_slot;
    e.new_ids = requests[i].prompt_ids;
    entries.push_back(std::move(e));
  }
  ForwardMode mode = ForwardMode::kExtend;
  while (true) {
    ForwardBatch batch = runner_.build_batch(mode, entries);
    Tensor logits = runner_.forward(batch);
    std::vector<ops::SamplingRow> rows;
    std::vector<Active*> stepped;
    for (Active& a : active) {
      if (a.done) continue;
      a.seq_len += static_cast<int64_t>(mode == ForwardMode::kExtend ? requests[a.index].prompt_ids.size() : 1);
      ops::SamplingRow row = requests[a.index].sampling;
      row.step = outputs[a.index].output_ids.size();
      rows.push_back(row);
      stepped.push_back(&a);
    }
    std::vector<int32_t> next = runner_.sample(logits, rows);
    entries.clear();
    for (size_t k = 0; k < stepped.size(); ++k) {
      Active& a = *stepped[k];
      const GenerateRequest& req = requests[a.index];
      GenerateOutput& out = outputs[a.index];
      out.output_ids.push_back(next[k]);
      const bool is_eos = std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), next[k]) != c.eos_token_ids.end();
      const bool is_stop =
          std::find(req.stop_token_ids.begin(), req.stop_token_ids.end(), next[k]) != req.stop_token_ids.end();
      if ((is_eos && !req.ignore_eos) || is_stop) {
        out.finish_reason = "stop";
      } else if (static_cast<int64_t>(out.output_ids.size()) >= req.max_tokens) {
        out.finish_reason = "length";
      } else {
        BatchEntry e;
        e.req_slot = a.req_slot;
        e.mamba_slot = a.mamba_slot;
        e.prefix_len = static_cast<int32_t>(a.seq_len);
        e.new_ids = {next[k]};
        if (!grow(a, a.seq_len + 1, e.new_slots)) {
          release_all();
          return Status(StatusCode::kResourceExhausted, "KV pool exhausted during decode");
        }
        entries.push_back(std::move(e));
        continue;
      }
      a.done = true;
      release(a);
    }
    if (entries.empty()) break;
    mode = ForwardMode::kDecode;
  }
  return Status::ok();
}

StatusOr<std::vector<GenerateOutput>> Generator::generate(const std::vector<GenerateRequest>& requests,
                                                          int64_t max_batch_size) {
  for (size_t i = 0; i < requests.size(); ++i) {
    Status st = validate(requests[i]);
    if (!st.is_ok()) return Status(st.code(), str("request ", i, ": ", st.message()));
  }
  std::vector<GenerateOutput> outputs(requests.size());
  const int64_t slots = runner_.req_to_token().max_requests();
  const int64_t group = max_batch_size > 0 ? std::min(max_batch_size, slots) : slots;
  for (size_t begin = 0; begin < requests.size(); begin += group) {
    const size_t end = std::min(requests.size(), begin + static_cast<size_t>(group));
    RLM_RETURN_IF_ERROR(run_group(requests, begin, end, outputs));
  }
  return outputs;
}

}  // namespace rlm
