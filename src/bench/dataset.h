// Synthetic prompt datasets for `radixlm bench serve`, following SGLang's bench_serving:
//
// - random: num_prompts independent prompts; input length uniform in
//   [max(1, floor(random_input_len * random_range_ratio)), random_input_len], output length
//   likewise from random_output_len (SGLang's range-ratio semantics).
// - generated-shared-prefix: gsp_num_groups groups; each has one system prompt of
//   gsp_system_prompt_len tokens shared by gsp_prompts_per_group questions of gsp_question_len
//   tokens; output length gsp_output_len; all prompts shuffled (as SGLang does).
// - multi-turn: num_prompts conversations of multi_turn_num_turns turns. Each turn adds a new user
//   message (length drawn like random's input) and asks for an answer (length like random's
//   output); the driver sends turn k with the whole history (earlier messages and the server's
//   answers) after turn k-1's answer arrived, so a prefix cache can reuse the history.
//
// Prompt content: with PromptFormat::kTokenIds a prompt is a list of random token ids, uniform in
// [token_id_low, token_id_high) (sent as OpenAI `prompt: [ids]` / SGLang `input_ids`), so input
// lengths are exact. With PromptFormat::kText a prompt is random words from a fixed list of common
// English words, each written with a leading space (" the", " water", ...), which byte-level BPE
// vocabularies (GPT-2, Llama 3, Qwen, SmolLM) encode as one token each; the length is then the word
// count, an estimate of the token count (the driver prefers the server's reported prompt_tokens).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace rlm::bench {

enum class DatasetKind { kRandom, kGeneratedSharedPrefix, kMultiTurn };
enum class PromptFormat { kTokenIds, kText };

StatusOr<DatasetKind> parse_dataset_kind(const std::string& name);
const char* dataset_kind_name(DatasetKind kind);

// One prompt: token ids (kTokenIds) or text (kText).
struct Prompt {
  std::vector<int32_t> ids;
  std::string text;
  int64_t len = 0;  // tokens (exact for ids, word count for text)
};

struct Turn {
  Prompt prompt;           // this turn's new content (multi-turn: the new user message only)
  int64_t output_len = 0;  // max_tokens asked for this turn
};

// A unit of work for the driver: single-turn datasets produce conversations of one turn.
struct Conversation {
  std::vector<Turn> turns;
  int64_t group = -1;  // shared-prefix group index (generated-shared-prefix only)
};

struct DatasetOptions {
  DatasetKind kind = DatasetKind::kRandom;
  PromptFormat format = PromptFormat::kTokenIds;
  int64_t num_prompts = 1000;
  int64_t random_input_len = 1024;
  int64_t random_output_len = 1024;
  double random_range_ratio = 0.0;
  int64_t gsp_num_groups = 64;
  int64_t gsp_prompts_per_group = 16;
  int64_t gsp_system_prompt_len = 2048;
  int64_t gsp_question_len = 128;
  int64_t gsp_output_len = 256;
  int64_t multi_turn_num_turns = 3;
  int32_t token_id_low = 1000;    // random token ids are drawn from [low, high)
  int32_t token_id_high = 10000;
  uint64_t seed = 1;
};

// Validates the options (a clear message for each bad value) and builds the dataset.
StatusOr<std::vector<Conversation>> build_dataset(const DatasetOptions& options);

// Length range of the random dataset: [max(1, floor(len * ratio)), len].
std::pair<int64_t, int64_t> random_len_range(int64_t len, double ratio);

// The fixed word list used for text prompts.
const std::vector<std::string>& prompt_words();

}  // namespace rlm::bench
