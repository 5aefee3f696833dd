// Fuzz-style tests of the file parsers that read untrusted bytes: the GGUF reader (and the model
// config it synthesises), the safetensors header parser and the config.json parser (generic
// and Qwen3-Next fields). Each feeds 10,000 seeded mutations of valid files (byte edits,
// dictionary splices, extreme integers, wrong JSON types for every field) and requires an error
// Status or a valid result, never a crash, an exception or a hang. The seed is printed; rerun a
// failure with RADIXLM_FUZZ_SEED=<seed> (RADIXLM_FUZZ_ITERS=<n> changes the count).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/json.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "model/gguf_weights.h"
#include "model/model_config.h"
#include "model/qwen3_next.h"
#include "tokenizer/tokenizer.h"
#include "unit/fuzz_util.h"

namespace rlm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kRoot = RADIXLM_SOURCE_DIR;

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes `bytes` to one reused temporary file (in memory where /dev/shm exists) and returns its path.
class Scratch {
 public:
  explicit Scratch(const std::string& name)
      : path_(fs::path(fs::is_directory("/dev/shm") ? "/dev/shm" : ::testing::TempDir()) /
              (std::to_string(::getpid()) + "_" + name)) {}
  ~Scratch() { fs::remove(path_); }
  const std::string& write(const std::string& bytes) {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << bytes;
    path_str_ = path_.string();
    return path_str_;
  }

 private:
  fs::path path_;
  std::string path_str_;
};

// A random JSON value of any type (for replacing fields with wrong types).
json random_value(fuzz::Mutator& m, int depth = 0) {
  switch (m.below(depth < 2 ? 10 : 8)) {
    case 0: return nullptr;
    case 1: return m.below(2) == 0;
    case 2: return static_cast<int64_t>(m.rng()()) >> m.below(64);
    case 3: return m.rng()();  // unsigned, often above INT64_MAX
    case 4: return std::vector<double>{0.0, -0.0, 1e308, -1e-308, 0.5}[m.below(5)];
    case 5: return std::string(m.below(3) == 0 ? "" : "llama");
    case 6: return -1;
    case 7: return 0;
    case 8: return json::array({random_value(m, depth + 1), random_value(m, depth + 1)});
    default: return json::object({{"rope_type", random_value(m, depth + 1)}, {"factor", random_value(m, depth + 1)}});
  }
}

// Replaces 1-3 fields (top level or one level down) of `j` with random values, or removes them.
void mutate_fields(json& j, fuzz::Mutator& m) {
  const int n = 1 + static_cast<int>(m.below(3));
  for (int e = 0; e < n; ++e) {
    json* target = &j;
    if (m.below(4) == 0) {
      std::vector<json*> objects;
      for (auto& [k, v] : j.items()) {
        if (v.is_object()) objects.push_back(&v);
      }
      if (!objects.empty()) target = objects[m.below(objects.size())];
    }
    if (target->empty()) continue;
    auto it = target->begin();
    std::advance(it, static_cast<long>(m.below(target->size())));
    if (m.below(6) == 0) {
      target->erase(it.key());
    } else {
      *it = random_value(m);
    }
  }
}

// ---- GGUF ---------------------------------------------------------------------------------------

TEST(ParserFuzz, GgufReaderAndConfig) {
  const fs::path dir = kRoot / "tests" / "data" / "gguf";
  std::vector<std::string> seeds;
  for (const char* name : {"fixture.gguf", "tiny_llama3_rope.gguf", "tiny_qwen2.gguf"}) {
    seeds.push_back(read_all(dir / name));
    ASSERT_FALSE(seeds.back().empty()) << name;
  }
  std::vector<size_t> header_end;  // the parsed region (metadata + tensor infos) of each seed
  for (const auto* name : {"fixture.gguf", "tiny_llama3_rope.gguf", "tiny_qwen2.gguf"}) {
    header_end.push_back(GgufFile::open((dir / name).string()).value()->data_offset());
  }
  fuzz::Mutator m(fuzz::seed(7001), {"GGUF", std::string("\x09\0\0\0", 4), std::string("\x08\0\0\0", 4),
                                     "llama", "general.architecture", "tokenizer.ggml.tokens"});
  Scratch scratch("parser_fuzz.gguf");
  const int iters = fuzz::iterations(10000);
  int opened = 0, configs = 0;
  uint64_t data_sum = 0;  // printed, so the reads of every tensor's bytes stay in the program
  fuzz::SlowestInput slowest;
  for (int i = 0; i < iters; ++i) {
    const size_t s = i % seeds.size();
    // Most edits land in the parsed region; the data section is bytes to the reader.
    std::string head = m.mutate(seeds[s].substr(0, header_end[s]));
    const std::string bytes = head + seeds[s].substr(header_end[s]);
    SCOPED_TRACE(testing::Message() << "input " << i);
    slowest.run([&] {
      auto f = GgufFile::open(scratch.write(bytes));
      if (!f.is_ok()) {
        EXPECT_FALSE(f.status().message().empty());
        return;
      }
      ++opened;
      const GgufFile& g = **f;
      for (const std::string& key : g.keys()) {
        const GgufValue* v = g.find(key);
        ASSERT_NE(v, nullptr);
        (void)v->describe();
        (void)g.get_string_array(key);
        (void)g.get_int_array(key);
        (void)g.get_float_array(key);
        if (v->type() == GgufValueType::kArray && v->array_size() > 0) (void)v->at(v->array_size() - 1).describe();
      }
      for (const GgufTensorInfo& t : g.tensors()) {
        const auto data = g.tensor_data(t);
        for (uint8_t b : data) data_sum += b;  // every byte is inside the mapping (ASan/segfault otherwise)
        // The reader's byte count agrees with the element count (dequantize_tensor sizes its output by it).
        const auto traits = ggml_type_traits(static_cast<uint32_t>(t.type));
        ASSERT_TRUE(traits.has_value());
        EXPECT_EQ(static_cast<unsigned __int128>(t.numel() / traits->block_size) * traits->type_size,
                  static_cast<unsigned __int128>(data.size()));
      }
      auto config = gguf_model_config(g);
      if (config.is_ok()) {
        ++configs;
        EXPECT_GT(config->hidden_size, 0);
        EXPECT_GT(config->num_attention_heads, 0);
      }
    });
  }
  std::printf(
      "%d of %d mutated GGUF files opened, %d gave a model config (tensor bytes sum %llu); slowest %.3f s\n",
      opened, iters, configs, static_cast<unsigned long long>(data_sum), slowest.seconds());
  EXPECT_GT(opened, 0);
  EXPECT_LT(slowest.seconds(), 5.0);
}

// ---- safetensors ----------------------------------------------------------------------------------

TEST(ParserFuzz, SafetensorsHeader) {
  const std::string file = read_all(kRoot / "tests" / "data" / "safetensors" / "fixture.safetensors");
  ASSERT_GE(file.size(), 8u);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(file[i]);
  const std::string header = file.substr(8, header_len), data = file.substr(8 + header_len);
  fuzz::Mutator m(fuzz::seed(7002), fuzz::json_dictionary());
  Scratch scratch("parser_fuzz.safetensors");
  const int iters = fuzz::iterations(10000);
  int opened = 0;
  fuzz::SlowestInput slowest;
  for (int i = 0; i < iters; ++i) {
    std::string bytes;
    if (m.below(4) == 0) {
      bytes = m.mutate(file);  // raw bytes, length prefix included
    } else {                   // the header text, with a consistent length prefix
      const std::string h = m.mutate(header);
      bytes.resize(8);
      for (int b = 0; b < 8; ++b) bytes[b] = static_cast<char>((h.size() >> (8 * b)) & 0xff);
      bytes += h + data;
    }
    SCOPED_TRACE(testing::Message() << "input " << i);
    slowest.run([&] {
      auto f = SafetensorsFile::open(scratch.write(bytes));
      if (!f.is_ok()) {
        EXPECT_FALSE(f.status().message().empty());
        return;
      }
      ++opened;
      for (const std::string& name : (*f)->names()) {
        auto t = (*f)->tensor(name);
        ASSERT_TRUE(t.is_ok()) << name << ": " << t.status().to_string();
        const SafetensorsEntry* e = (*f)->find(name);
        ASSERT_NE(e, nullptr);
        EXPECT_LE(e->end, (*f)->file_size());
        EXPECT_EQ(static_cast<uint64_t>(t->numel()) * dtype_size(t->dtype()), e->end - e->begin);
      }
    });
  }
  std::printf("%d of %d mutated safetensors files opened; slowest %.3f s\n", opened, iters, slowest.seconds());
  EXPECT_GT(opened, 0);
  EXPECT_LT(slowest.seconds(), 5.0);
}

// ---- config.json ----------------------------------------------------------------------------------

TEST(ParserFuzz, ModelConfig) {
  std::vector<std::string> seeds;
  for (const auto& entry : fs::directory_iterator(kRoot / "tests" / "data" / "configs")) {
    if (fs::exists(entry.path() / "config.json")) seeds.push_back(read_all(entry.path() / "config.json"));
  }
  for (const char* g : {"qwen3next_gqa2_int2_moe4top2", "qwen3next_layertypes_sparse2_tied", "llama_gqa2_hd64_tied"}) {
    seeds.push_back(read_all(kRoot / "tests" / "golden" / g / "config.json"));
  }
  std::sort(seeds.begin(), seeds.end());  // directory order is not fixed; the seed must reproduce
  ASSERT_GE(seeds.size(), 8u);
  fuzz::Mutator m(fuzz::seed(7003), fuzz::json_dictionary());
  Scratch scratch("parser_fuzz_config.json");
  const int iters = fuzz::iterations(10000);
  int valid = 0;
  fuzz::SlowestInput slowest;
  for (int i = 0; i < iters; ++i) {
    const std::string& seed_text = seeds[i % seeds.size()];
    std::string text;
    if (m.below(2) == 0) {
      text = m.mutate(seed_text);  // text edits
    } else {                       // wrong types and missing fields
      json j = json::parse(seed_text);
      mutate_fields(j, m);
      text = j.dump();
    }
    SCOPED_TRACE(testing::Message() << "input " << i);
    slowest.run([&] {
      auto c = load_model_config(scratch.write(text));
      if (!c.is_ok()) {
        EXPECT_NE(c.status().code(), StatusCode::kOk);
        EXPECT_FALSE(c.status().message().empty());
        return;
      }
      ++valid;
      EXPECT_GT(c->vocab_size, 0);
      EXPECT_GT(c->hidden_size, 0);
      EXPECT_GT(c->num_hidden_layers, 0);
      EXPECT_GT(c->num_attention_heads, 0);
      EXPECT_GT(c->num_key_value_heads, 0);
      EXPECT_GT(c->head_dim, 0);
      EXPECT_EQ(c->num_attention_heads % c->num_key_value_heads, 0);
      EXPECT_EQ(static_cast<int64_t>(c->layer_types.size()), c->num_hidden_layers);
      if (c->architecture == "Qwen3NextForCausalLM") (void)parse_qwen3_next_spec(*c);
    });
  }
  std::printf("%d of %d mutated configs valid; slowest %.3f s\n", valid, iters, slowest.seconds());
  EXPECT_GT(valid, 0);
  EXPECT_LT(slowest.seconds(), 5.0);
}

// ---- hostile nesting in model files ---------------------------------------------------------------

// config.json, tokenizer.json and tokenizer_config.json nested 100,000 deep used to overflow the
// stack of the loader; now each is an error naming the file and the limit.
TEST(ParserFuzz, DeeplyNestedModelFilesAreErrors) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("parser_fuzz_deep_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string deep = "{\"a\":" + std::string(100'000, '[') + std::string(100'000, ']') + "}";
  std::ofstream(dir / "config.json") << deep;
  auto c = load_model_config(dir.string());
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("nests deeper than 512 levels"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("config.json"), std::string::npos);
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(kRoot / "tests" / "data" / "tokenizer" / "tiny512" / "tokenizer.json", dir / "tokenizer.json",
                  fs::copy_options::overwrite_existing);
    std::ofstream(dir / name, std::ios::trunc) << deep;
    auto t = load_tokenizer(dir.string());
    ASSERT_FALSE(t.is_ok()) << name;
    EXPECT_NE(t.status().message().find("nests deeper than 512 levels"), std::string::npos) << t.status().message();
    EXPECT_NE(t.status().message().find(name), std::string::npos) << t.status().message();
    fs::remove(dir / "tokenizer_config.json");
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rlm
