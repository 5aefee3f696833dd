#include "model/quantization_config.h"

#include <filesystem>

#include "core/json.h"

namespace rlm {
namespace {

using nlohmann::json;

std::string text(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A compressed-tensors quantization args object must describe 8-bit float (E4M3) values.
Status check_ct_args(const json& args, const std::string& where, bool weights) {
  if (args.is_null()) {
    return weights ? invalid_argument(str("compressed-tensors ", where, ": no `weights` entry")) : Status::ok();
  }
  if (!args.is_object()) return invalid_argument(str("compressed-tensors ", where, " must be an object"));
  const int64_t bits = args.value("num_bits", int64_t{0});
  const std::string type = text(args, "type");
  if (bits != 8 || type != "float") {
    return unimplemented(str("quant_method 'compressed-tensors': ", where, " is ", bits, "-bit ", type.empty() ? "?" : type,
                             "; only FP8 (8-bit float) schemes are supported"));
  }
  const std::string strategy = text(args, "strategy");
  if (weights && strategy != "tensor" && strategy != "channel") {
    return unimplemented(str("quant_method 'compressed-tensors': ", where, " strategy '", strategy,
                             "' is not supported (tensor or channel)"));
  }
  if (!weights && strategy != "tensor" && strategy != "token") {
    return unimplemented(str("quant_method 'compressed-tensors': ", where, " strategy '", strategy,
                             "' is not supported (tensor or token)"));
  }
  return Status::ok();
}

StatusOr<QuantizationSpec> parse_method(const json& q, const std::string& where) {
  if (!q.is_object()) return invalid_argument(str(where, " must be a JSON object"));
  QuantizationSpec s;
  const std::string method = text(q, "quant_method");
  if (method == "fp8") {
    const std::string fmt = text(q, "fmt");
    if (!fmt.empty() && fmt != "e4m3") {
      return unimplemented(str("quant_method 'fp8' with fmt '", fmt, "' is not supported (e4m3 only)"));
    }
    const auto it = q.find("weight_block_size");
    if (it != q.end() && !it->is_null()) {
      if (!it->is_array() || it->size() != 2 || !(*it)[0].is_number_integer() || !(*it)[1].is_number_integer() ||
          (*it)[0].get<int64_t>() <= 0 || (*it)[1].get<int64_t>() <= 0) {
        return invalid_argument(str(where, ".weight_block_size must be two positive integers, got ", it->dump()));
      }
      s.block_n = (*it)[0].get<int64_t>();
      s.block_k = (*it)[1].get<int64_t>();
    }
  } else if (method == "compressed-tensors") {
    const auto groups = q.find("config_groups");
    if (groups == q.end() || !groups->is_object() || groups->empty()) {
      return invalid_argument(str(where, ".config_groups must be a non-empty object"));
    }
    for (const auto& [name, g] : groups->items()) {
      if (!g.is_object()) return invalid_argument(str(where, ".config_groups.", name, " must be an object"));
      RLM_RETURN_IF_ERROR(check_ct_args(g.value("weights", json()), str("config_groups.", name, ".weights"), true));
      RLM_RETURN_IF_ERROR(check_ct_args(g.value("input_activations", json()),
                                        str("config_groups.", name, ".input_activations"), false));
    }
  } else if (method == "modelopt") {
    const std::string algo = text(q, "quant_algo");
    if (algo != "FP8") {
      return unimplemented(str("quant_method 'modelopt' with quant_algo '", algo, "' is not supported (FP8 only)"));
    }
  } else {
    return unimplemented(str("quant_method '", method.empty() ? std::string("(none)") : method,
                             "' is not supported (supported: fp8, compressed-tensors FP8, modelopt FP8)"));
  }
  s.method = method;
  return s;
}

}  // namespace

StatusOr<QuantizationSpec> parse_quantization_spec(const ModelConfig& config, const std::string& model_dir) {
  const auto it = config.raw.find("quantization_config");
  if (it != config.raw.end() && !it->is_null()) return parse_method(*it, "quantization_config");
  // ModelOpt exports may describe the quantization only in hf_quant_config.json.
  const std::string hf_quant = (std::filesystem::path(model_dir) / "hf_quant_config.json").string();
  if (std::filesystem::is_regular_file(hf_quant)) {
    RLM_ASSIGN_OR_RETURN(json j, read_json_file(hf_quant));
    const auto q = j.find("quantization");
    if (q == j.end() || !q->is_object()) return invalid_argument(str(hf_quant, ": no \"quantization\" object"));
    json spec = *q;
    spec["quant_method"] = "modelopt";
    return parse_method(spec, hf_quant);
  }
  return QuantizationSpec{};
}

}  // namespace rlm
