#include "server/offline_engine.h"

#include <chrono>

namespace rlm {

OfflineEngine::OfflineEngine(ServingEngine& engine) : engine_(engine) {
  RLM_CHECK(!engine.started()) << "OfflineEngine over a ServingEngine whose scheduler thread runs";
}

StatusOr<std::vector<OfflineOutput>> OfflineEngine::generate(const std::vector<OfflineRequest>& requests) {
  Scheduler& scheduler = engine_.scheduler();
  for (size_t i = 0; i < requests.size(); ++i) {
    Req probe;
    probe.prompt_ids = requests[i].prompt_ids;
    probe.params = requests[i].params;
    const Status st = scheduler.validate(probe);
    if (!st.is_ok()) return Status(st.code(), str("request ", i, ": ", st.message()));
  }
  std::vector<OfflineOutput> outputs(requests.size());
  std::vector<std::shared_ptr<Req>> reqs;
  std::vector<bool> finished(requests.size(), false);
  size_t num_finished = 0;
  // Reads what each submitted request streamed so far.
  auto collect = [&] {
    for (size_t i = 0; i < reqs.size(); ++i) {
      while (!finished[i]) {
        std::optional<StreamEvent> ev = reqs[i]->stream->pop(std::chrono::milliseconds(0));
        if (!ev) break;
        OfflineOutput& out = outputs[i];
        out.text += ev->text;
        out.output_ids.insert(out.output_ids.end(), ev->token_ids.begin(), ev->token_ids.end());
        out.logprobs.insert(out.logprobs.end(), ev->logprobs.begin(), ev->logprobs.end());
        if (ev->finish) {
          out.finish = std::move(*ev->finish);
          finished[i] = true;
          ++num_finished;
        }
      }
    }
  };
  while (num_finished < requests.size()) {
    // Submit what the queue takes (a full queue makes room as requests are admitted).
    while (reqs.size() < requests.size()) {
      const OfflineRequest& r = requests[reqs.size()];
      StatusOr<std::shared_ptr<Req>> req =
          engine_.submit(r.prompt_ids, r.params, str("offline-", next_id_++), /*group=*/"");
      if (!req.is_ok()) {
        if (req.status().code() == StatusCode::kUnavailable && scheduler.has_work()) break;
        for (const auto& q : reqs) scheduler.abort(q->rid);
        while (scheduler.step()) {
        }
        return Status(req.status().code(), str("request ", reqs.size(), ": ", req.status().message()));
      }
      reqs.push_back(std::move(req).value());
    }
    const bool progressed = scheduler.step();
    collect();
    if (!progressed && num_finished < requests.size() && (scheduler.has_work() || reqs.size() == requests.size())) {
      return internal_error(str("the scheduler stalled with ", requests.size() - num_finished, " unfinished requests"));
    }
  }
  if (scheduler.config().check_integrity_when_idle) RLM_RETURN_IF_ERROR(scheduler.check_integrity());
  return outputs;
}

}  // namespace rlm
