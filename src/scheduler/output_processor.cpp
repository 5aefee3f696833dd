#include "scheduler/output_processor.h"

#include <algorithm>

#include "core/check.h"

namespace rlm {

OutputProcessor::OutputProcessor(std::unique_ptr<TokenTextDecoder> decoder, std::vector<std::string> stop)
    : decoder_(std::move(decoder)), stop_(std::move(stop)) {
  RLM_CHECK(decoder_ != nullptr) << "OutputProcessor needs a decoder";
}

OutputProcessor::Result OutputProcessor::push(int32_t token) {
  RLM_CHECK(!stopped_) << "token pushed after a stop string matched";
  Result r;
  pending_ += decoder_->push(token);
  if (stop_.empty()) {
    r.text.swap(pending_);
    return r;
  }
  // Earliest full stop-string occurrence in the pending text.
  size_t best = std::string::npos;
  const std::string* best_stop = nullptr;
  for (const std::string& s : stop_) {
    size_t pos = pending_.find(s);
    if (pos != std::string::npos && (best == std::string::npos || pos < best)) {
      best = pos;
      best_stop = &s;
    }
  }
  if (best != std::string::npos) {
    r.text = pending_.substr(0, best);
    r.matched_stop = *best_stop;
    pending_.clear();
    stopped_ = true;
    return r;
  }
  // Hold back the longest suffix of pending_ that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& s : stop_) {
    const size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  r.text = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return r;
}

std::string OutputProcessor::flush() {
  if (stopped_) return "";
  std::string tail = decoder_->flush();
  pending_ += tail;
  // A stop string could complete only within the flushed tail.
  for (const std::string& s : stop_) {
    size_t pos = pending_.find(s);
    if (pos != std::string::npos) {
      pending_.resize(pos);
      stopped_ = true;
    }
  }
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace rlm
