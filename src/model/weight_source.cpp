#include "model/weight_source.h"

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "core/json.h"
#include "core/random_fill.h"
#include "formats/gguf_dequant.h"
#include "formats/safetensors.h"

namespace rlm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

Status check_shape(const std::string& name, const std::string& where, const Shape& actual, const Shape& expected) {
  if (actual == expected) return Status::ok();
  return invalid_argument(str("tensor '", name, "' in ", where, " has shape ", shape_to_string(actual),
                              " but the model expects ", shape_to_string(expected)));
}

class SafetensorsWeightSource final : public WeightSource {
 public:
  SafetensorsWeightSource(std::string location, std::vector<std::shared_ptr<SafetensorsFile>> files,
                          std::unordered_map<std::string, size_t> file_of)
      : location_(std::move(location)), files_(std::move(files)), file_of_(std::move(file_of)) {}

  bool has(const std::string& name) const override { return file_of_.count(name) != 0; }

  StatusOr<Tensor> get(const std::string& name, const Shape& expected_shape) override {
    auto it = file_of_.find(name);
    if (it == file_of_.end()) return not_found(str("tensor '", name, "' not found in ", describe()));
    const SafetensorsFile& file = *files_[it->second];
    RLM_ASSIGN_OR_RETURN(Tensor t, file.tensor(name));
    RLM_RETURN_IF_ERROR(check_shape(name, file.path(), t.shape(), expected_shape));
    return t;
  }

  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    out.reserve(file_of_.size());
    for (const auto& [name, _] : file_of_) out.push_back(name);
    std::sort(out.begin(), out.end());
    return out;
  }

  std::string describe() const override {
    return str("safetensors: ", location_, " (", files_.size(), files_.size() == 1 ? " file)" : " files)");
  }

 private:
  std::string location_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string, size_t> file_of_;  // tensor name -> index into files_
};

// Adds every tensor of files_[i] not yet known; a name already taken by another file is an error.
Status add_file_tensors(const std::vector<std::shared_ptr<SafetensorsFile>>& files, size_t i,
                        std::unordered_map<std::string, size_t>* file_of, const std::set<std::string>& indexed) {
  for (const std::string& name : files[i]->names()) {
    if (indexed.count(name)) continue;  // the index decides where it lives
    auto [it, inserted] = file_of->emplace(name, i);
    if (!inserted)
      return data_loss(str("tensor '", name, "' appears in both ", files[it->second]->path(), " and ", files[i]->path()));
  }
  return Status::ok();
}

StatusOr<std::unique_ptr<WeightSource>> open_index(const fs::path& dir, const fs::path& index_path) {
  const std::string index_name = index_path.string();
  StatusOr<json> parsed = read_json_file(index_name);
  if (!parsed.is_ok()) {
    if (parsed.status().code() == StatusCode::kNotFound) return invalid_argument(str(index_name, ": cannot open for reading"));
    return data_loss(parsed.status().message());
  }
  const json& j = *parsed;
  if (!j.is_object() || !j.contains("weight_map") || !j.at("weight_map").is_object())
    return data_loss(str(index_name, ": expected an object with a \"weight_map\" object"));

  std::vector<std::shared_ptr<SafetensorsFile>> files;
  std::unordered_map<std::string, size_t> shard_index;  // shard file name -> index into files
  std::unordered_map<std::string, size_t> file_of;
  std::set<std::string> indexed;
  for (const auto& [name, v] : j.at("weight_map").items()) {
    if (!v.is_string()) return data_loss(str(index_name, ": weight_map entry for '", name, "' is not a file name"));
    const std::string shard = v.get<std::string>();
    const fs::path rel(shard);
    if (shard.empty() || rel.is_absolute() || std::find(rel.begin(), rel.end(), fs::path("..")) != rel.end())
      return data_loss(str(index_name, ": shard '", shard, "' of tensor '", name,
                           "' must be a file name inside the model directory"));
    auto it = shard_index.find(shard);
    if (it == shard_index.end()) {
      const fs::path shard_path = dir / rel;
      std::error_code ec;
      if (!fs::exists(shard_path, ec))
        return not_found(str(index_name, " lists shard '", shard, "' (for tensor '", name, "') but ",
                             shard_path.string(), " does not exist"));
      RLM_ASSIGN_OR_RETURN(std::shared_ptr<SafetensorsFile> file, SafetensorsFile::open(shard_path.string()));
      it = shard_index.emplace(shard, files.size()).first;
      files.push_back(std::move(file));
    }
    if (!files[it->second]->has(name))
      return data_loss(str(index_name, " maps tensor '", name, "' to ", files[it->second]->path(),
                           ", which does not contain it"));
    file_of.emplace(name, it->second);
    indexed.insert(name);
  }
  // Tensors stored in the shards but left out of the index load too (as transformers does).
  for (size_t i = 0; i < files.size(); ++i) RLM_RETURN_IF_ERROR(add_file_tensors(files, i, &file_of, indexed));
  return std::unique_ptr<WeightSource>(new SafetensorsWeightSource(dir.string(), std::move(files), std::move(file_of)));
}

StatusOr<std::unique_ptr<WeightSource>> open_files(const std::string& location, const std::vector<fs::path>& paths) {
  std::vector<std::shared_ptr<SafetensorsFile>> files;
  std::unordered_map<std::string, size_t> file_of;
  for (const fs::path& p : paths) {
    RLM_ASSIGN_OR_RETURN(std::shared_ptr<SafetensorsFile> file, SafetensorsFile::open(p.string()));
    files.push_back(std::move(file));
    RLM_RETURN_IF_ERROR(add_file_tensors(files, files.size() - 1, &file_of, {}));
  }
  return std::unique_ptr<WeightSource>(new SafetensorsWeightSource(location, std::move(files), std::move(file_of)));
}

// ---- dummy weights ------------------------------------------------------------------------

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

class DummyWeightSource final : public WeightSource {
 public:
  DummyWeightSource(DType dtype, uint64_t seed, float scale, std::optional<DType> matrix_dtype)
      : dtype_(dtype), seed_(seed), scale_(scale), matrix_dtype_(matrix_dtype) {}

  bool has(const std::string&) const override { return true; }  // any name, any shape
  bool synthesizes_any_name() const override { return true; }

  StatusOr<Tensor> get(const std::string& name, const Shape& expected_shape) override {
    for (int64_t d : expected_shape)
      if (d < 0) return invalid_argument(str("dummy weight '", name, "': negative dimension in shape ",
                                             shape_to_string(expected_shape)));
    if (matrix_dtype_ && expected_shape.size() == 2 && expected_shape[1] % dtype_block_size(*matrix_dtype_) == 0) {
      // Random blocks (quants and scales) of the GGUF type, deterministic in (seed, name).
      Tensor t = Tensor::empty(expected_shape, *matrix_dtype_);
      fill_random_blocks(*matrix_dtype_, t.data_ptr(), t.numel() / dtype_block_size(*matrix_dtype_),
                         mix64(seed_ ^ mix64(fnv1a(name))), scale_);
      std::lock_guard<std::mutex> lock(mu_);
      served_.insert(name);
      return t;
    }
    Tensor t = Tensor::empty(expected_shape, dtype_);
    fill(name, t);
    std::lock_guard<std::mutex> lock(mu_);
    served_.insert(name);
    return t;
  }

  std::vector<std::string> names() const override {  // the names handed out so far
    std::lock_guard<std::mutex> lock(mu_);
    return {served_.begin(), served_.end()};
  }

  std::string describe() const override {
    return str("dummy: U(-", scale_, ", ", scale_, ") ", dtype_name(dtype_), " weights",
               matrix_dtype_ ? str(", random ", dtype_name(*matrix_dtype_), " blocks for matrices") : "", ", seed ", seed_);
  }

 private:
  // Element i of tensor `name` is a function of (seed, name, i) only (fill_uniform_counter), so
  // the fill runs on all cores with identical results.
  void fill(const std::string& name, const Tensor& t) const {
    fill_uniform_counter(mix64(seed_ ^ mix64(fnv1a(name))), scale_, dtype_, t.data_ptr(), t.numel());
  }

  DType dtype_;
  uint64_t seed_;
  float scale_;
  std::optional<DType> matrix_dtype_;
  mutable std::mutex mu_;
  std::set<std::string> served_;
};

}  // namespace

StatusOr<std::unique_ptr<WeightSource>> open_safetensors(const std::string& model_dir) {
  std::error_code ec;
  const fs::path dir(model_dir);
  if (fs::is_regular_file(dir, ec) && dir.extension() == ".safetensors") return open_files(model_dir, {dir});
  if (!fs::is_directory(dir, ec)) return not_found(str("model directory not found: ", model_dir));
  if (fs::exists(dir / "model.safetensors", ec)) return open_files(model_dir, {dir / "model.safetensors"});
  if (fs::exists(dir / "model.safetensors.index.json", ec)) return open_index(dir, dir / "model.safetensors.index.json");
  std::vector<fs::path> paths;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") paths.push_back(e.path());
  if (ec) return invalid_argument(str("cannot list ", model_dir, ": ", ec.message()));
  if (paths.empty()) return not_found(str("no *.safetensors files in ", model_dir));
  std::sort(paths.begin(), paths.end());
  return open_files(model_dir, paths);
}

std::unique_ptr<WeightSource> make_dummy_weights(DType dtype, uint64_t seed, float scale,
                                                 std::optional<DType> matrix_dtype) {
  RLM_CHECK(is_floating(dtype)) << "dummy weights need a float dtype, got " << dtype_name(dtype);
  RLM_CHECK(scale >= 0.0f) << "dummy weight scale " << scale;
  RLM_CHECK(!matrix_dtype || is_quantized(*matrix_dtype))
      << "dummy matrix dtype " << dtype_name(*matrix_dtype) << " is not block-quantized";
  return std::make_unique<DummyWeightSource>(dtype, seed, scale, matrix_dtype);
}

}  // namespace rlm
