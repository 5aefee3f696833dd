#include "bench/dataset.h"

#include <algorithm>
#include <cmath>

#include "bench/rng.h"

namespace rlm::bench {

namespace {

// Common English words; with a leading space each is a single token in byte-level BPE
// vocabularies of the usual model families.
const char* const kWords[] = {
    "the",    "of",     "and",    "to",     "in",     "is",     "that",   "for",    "it",
    "as",     "was",    "with",   "be",     "by",     "on",     "not",    "he",     "this",
    "are",    "or",     "his",    "from",   "at",     "which",  "but",    "have",   "an",
    "had",    "they",   "you",    "were",   "their",  "one",    "all",    "we",     "can",
    "her",    "has",    "there",  "been",   "if",     "more",   "when",   "will",   "would",
    "who",    "so",     "no",     "time",   "people", "year",   "way",    "day",    "man",
    "thing",  "woman",  "life",   "child",  "world",  "school", "state",  "family", "student",
    "group",  "country", "problem", "hand", "part",   "place",  "case",   "week",   "company",
    "system", "program", "question", "work", "number", "night", "point",  "home",   "water",
    "room",   "mother", "area",   "money",  "story",  "fact",   "month",  "lot",    "right",
    "study",  "book",   "eye",    "job",    "word",   "business", "issue", "side",  "kind",
    "head",   "house",  "service", "friend", "father", "power", "hour",   "game",   "line",
    "end",    "member", "law",    "car",    "city",   "name",   "team",   "minute", "idea",
    "kid",    "body",   "back",   "parent", "face",   "others", "level",  "office", "door",
    "health", "person", "art",    "war",    "history", "party", "result", "change", "morning",
    "reason", "research", "girl", "guy",    "moment", "air",    "teacher", "force", "education",
    "good",   "new",    "first",  "last",   "long",   "great",  "little", "own",    "other",
    "old",    "big",    "high",   "different", "small", "large", "next",  "early",  "young",
    "important", "few", "public", "bad",    "same",   "able",   "make",   "know",   "take",
    "see",    "come",   "think",  "look",   "want",   "give",   "use",    "find",   "tell",
    "ask",    "seem",   "feel",   "try",    "leave",  "call",   "keep",   "let",    "begin",
    "show",   "hear",   "play",   "run",    "move",   "live",   "believe", "bring", "happen",
    "write",  "sit",    "stand",  "lose",   "pay",    "meet",   "include", "continue", "set",
    "learn",  "lead",   "understand", "watch", "follow", "stop", "create", "speak", "read",
    "spend",  "grow",   "open",   "walk",   "win",    "offer",  "remember", "love", "consider",
    "appear", "buy",    "wait",   "serve",  "die",    "send",   "expect", "build",  "stay",
    "fall",   "cut",    "reach",  "kill",   "remain", "very",   "also",   "often",  "however",
    "too",    "usually", "really", "quickly", "never",  "always", "sometimes", "together", "likely",
};

Prompt make_prompt(PromptFormat format, int64_t len, const DatasetOptions& o, Rng& rng) {
  Prompt p;
  p.len = len;
  if (format == PromptFormat::kTokenIds) {
    p.ids.reserve(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) {
      p.ids.push_back(static_cast<int32_t>(rng.uniform_int(o.token_id_low, o.token_id_high - 1)));
    }
  } else {
    const auto& words = prompt_words();
    for (int64_t i = 0; i < len; ++i) {
      p.text.push_back(' ');
      p.text += words[static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(words.size()) - 1))];
    }
  }
  return p;
}

Prompt concat(const Prompt& a, const Prompt& b) {
  Prompt p;
  p.ids = a.ids;
  p.ids.insert(p.ids.end(), b.ids.begin(), b.ids.end());
  p.text = a.text + b.text;
  p.len = a.len + b.len;
  return p;
}

Status check_positive(const char* name, int64_t v) {
  if (v < 1) return invalid_argument(str(name, " must be >= 1, got ", v));
  return Status::ok();
}

Status validate(const DatasetOptions& o) {
  if (o.token_id_low < 0 || o.token_id_high <= o.token_id_low) {
    return invalid_argument(str("token id range [", o.token_id_low, ", ", o.token_id_high,
                                ") is empty or negative"));
  }
  switch (o.kind) {
    case DatasetKind::kMultiTurn:
      RLM_RETURN_IF_ERROR(check_positive("--multi-turn-num-turns", o.multi_turn_num_turns));
      if (o.format != PromptFormat::kText) {
        return invalid_argument(
            "the multi-turn dataset needs text prompts (each turn's history contains the server's "
            "text answers); use --prompt-format text");
      }
      [[fallthrough]];
    case DatasetKind::kRandom:
      RLM_RETURN_IF_ERROR(check_positive("--num-prompts", o.num_prompts));
      RLM_RETURN_IF_ERROR(check_positive("--random-input-len", o.random_input_len));
      RLM_RETURN_IF_ERROR(check_positive("--random-output-len", o.random_output_len));
      if (!(o.random_range_ratio >= 0.0 && o.random_range_ratio <= 1.0)) {
        return invalid_argument(
            str("--random-range-ratio must be in [0, 1], got ", o.random_range_ratio));
      }
      return Status::ok();
    case DatasetKind::kGeneratedSharedPrefix:
      RLM_RETURN_IF_ERROR(check_positive("--gsp-num-groups", o.gsp_num_groups));
      RLM_RETURN_IF_ERROR(check_positive("--gsp-prompts-per-group", o.gsp_prompts_per_group));
      RLM_RETURN_IF_ERROR(check_positive("--gsp-system-prompt-len", o.gsp_system_prompt_len));
      RLM_RETURN_IF_ERROR(check_positive("--gsp-question-len", o.gsp_question_len));
      RLM_RETURN_IF_ERROR(check_positive("--gsp-output-len", o.gsp_output_len));
      return Status::ok();
  }
  return internal_error("unknown dataset kind");
}

}  // namespace

StatusOr<DatasetKind> parse_dataset_kind(const std::string& name) {
  if (name == "random") return DatasetKind::kRandom;
  if (name == "generated-shared-prefix") return DatasetKind::kGeneratedSharedPrefix;
  if (name == "multi-turn") return DatasetKind::kMultiTurn;
  return invalid_argument(str("unknown --dataset-name '", name,
                              "' (expected random, generated-shared-prefix or multi-turn)"));
}

const char* dataset_kind_name(DatasetKind kind) {
  switch (kind) {
    case DatasetKind::kRandom: return "random";
    case DatasetKind::kGeneratedSharedPrefix: return "generated-shared-prefix";
    case DatasetKind::kMultiTurn: return "multi-turn";
  }
  return "?";
}

const std::vector<std::string>& prompt_words() {
  static const std::vector<std::string> words(std::begin(kWords), std::end(kWords));
  return words;
}

std::pair<int64_t, int64_t> random_len_range(int64_t len, double ratio) {
  int64_t lo = static_cast<int64_t>(std::floor(static_cast<double>(len) * ratio));
  return {std::clamp<int64_t>(lo, 1, len), len};
}

StatusOr<std::vector<Conversation>> build_dataset(const DatasetOptions& o) {
  RLM_RETURN_IF_ERROR(validate(o));
  Rng rng(o.seed);
  std::vector<Conversation> out;
  if (o.kind == DatasetKind::kGeneratedSharedPrefix) {
    for (int64_t g = 0; g < o.gsp_num_groups; ++g) {
      Prompt system = make_prompt(o.format, o.gsp_system_prompt_len, o, rng);
      for (int64_t q = 0; q < o.gsp_prompts_per_group; ++q) {
        Conversation c;
        c.group = g;
        c.turns.push_back({concat(system, make_prompt(o.format, o.gsp_question_len, o, rng)),
                           o.gsp_output_len});
        out.push_back(std::move(c));
      }
    }
    rng.shuffle(out);
    return out;
  }
  const auto [in_lo, in_hi] = random_len_range(o.random_input_len, o.random_range_ratio);
  const auto [out_lo, out_hi] = random_len_range(o.random_output_len, o.random_range_ratio);
  const int64_t num_turns = o.kind == DatasetKind::kMultiTurn ? o.multi_turn_num_turns : 1;
  for (int64_t i = 0; i < o.num_prompts; ++i) {
    Conversation c;
    for (int64_t t = 0; t < num_turns; ++t) {
      int64_t in_len = rng.uniform_int(in_lo, in_hi);
      int64_t out_len = rng.uniform_int(out_lo, out_hi);
      c.turns.push_back({make_prompt(o.format, in_len, o, rng), out_len});
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace rlm::bench
