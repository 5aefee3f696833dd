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
  std::vector<std::shared_ptr<Req>> reqs;
  // The scheduler runs on this thread: when it has no work left, every submitted request finished.
  while (reqs.size() < requests.size() || scheduler.has_work()) {
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
    if (!scheduler.step() && scheduler.has_work()) {
      return internal_error("the scheduler stalled with unfinished requests");
    }
  }
  // Every request's events are in its stream now: read them once.
  std::vector<OfflineOutput> outputs(requests.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    OfflineOutput& out = outputs[i];
    bool finished = false;
    while (std::optional<StreamEvent> ev = reqs[i]->stream->pop(std::chrono::milliseconds(0))) {
      out.text += ev->text;
      out.output_ids.insert(out.output_ids.end(), ev->token_ids.begin(), ev->token_ids.end());
      out.logprobs.insert(out.logprobs.end(), ev->logprobs.begin(), ev->logprobs.end());
      if (ev->finish) {
        out.finish = std::move(*ev->finish);
        finished = true;
      }
    }
    if (!finished) return internal_error(str("request ", i, " did not finish"));
  }
  if (scheduler.config().check_integrity_when_idle) RLM_RETURN_IF_ERROR(scheduler.check_integrity());
  return outputs;
}

}  // namespace rlm
