#include "model/checkpoint.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "numerics/formats.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_read.h"
#include "util/text.h"

namespace mxrl {
namespace fs = std::filesystem;

namespace {
void to_f32(const TensorView& t, float* out, const std::string& file) {
  const std::byte* p = t.data.data();
  const int64_t n = t.numel();
  switch (t.dtype) {
    case DType::F32: std::memcpy(out, p, n * 4); break;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      }
      break;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = f16_to_f32(h);
      }
      break;
    default: fail("{}: tensor '{}' has dtype {}; checkpoints hold F32, BF16 or F16", file, t.name, dtype_name(t.dtype));
  }
}

std::vector<std::byte> from_f32(const float* x, int64_t n, DType dtype) {
  std::vector<std::byte> out(n * dtype_size(dtype));
  if (dtype == DType::F32) {
    std::memcpy(out.data(), x, n * 4);
    return out;
  }
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = dtype == DType::BF16 ? f32_to_bf16(x[i]) : f32_to_f16(x[i]);
    std::memcpy(&out[2 * i], &h, 2);
  }
  return out;
}

const char* torch_dtype_name(DType d) {
  return d == DType::BF16 ? "bfloat16" : d == DType::F16 ? "float16" : "float32";
}
}  // namespace

Checkpoint load_checkpoint(const std::string& dir_s) {
  const fs::path dir(dir_s);
  if (!fs::is_directory(dir)) fail("{}: not a checkpoint directory", dir_s);
  const ModelConfig cfg = ModelConfig::load((dir / "config.json").string());
  Checkpoint ck{cfg, ParamTable(cfg), DType::F32, {}, {}, {}};

  // The files: one model.safetensors, or the shards of the index.
  std::vector<std::string> files;
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(index)) {
    const nlohmann::json j = json_parse(read_text_file(index), index.string());
    if (!j.contains("weight_map") || !j["weight_map"].is_object()) fail("{}: no weight_map object", index.string());
    std::set<std::string> seen;
    for (auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string()) fail("{}: weight_map entry '{}' is not a file name", index.string(), name);
      const std::string f = file.get<std::string>();
      if (f.find('/') != std::string::npos || f == "..")
        fail("{}: shard '{}' must be a file name in the directory", index.string(), f);
      ck.shard_of[name] = f;
      if (seen.insert(f).second) files.push_back(f);
    }
  } else {
    files.push_back("model.safetensors");
  }

  std::vector<bool> loaded(ck.params.entries().size(), false);
  bool dtype_set = false;
  for (const std::string& fname : files) {
    const std::string path = (dir / fname).string();
    const SafetensorsFile f = SafetensorsFile::open(path);
    for (const auto& t : f.tensors()) {
      if (!ck.shard_of.empty()) {
        auto it = ck.shard_of.find(t.name);
        if (it == ck.shard_of.end() || it->second != fname)
          fail("{}: tensor '{}' is not listed for this shard in model.safetensors.index.json", path, t.name);
      }
      const int i = ck.params.index_of(t.name);
      if (i < 0) {
        if (t.name == "lm_head.weight" && cfg.tie_word_embeddings) continue;  // a tied duplicate
        fail("{}: unexpected tensor '{}' for a {} with this config", path, t.name, cfg.model_type);
      }
      const ParamInfo& p = ck.params.entries()[i];
      if (t.shape != p.shape)
        fail("{}: tensor '{}' has shape {}, the config needs {}", path, t.name, shape_str(t.shape), shape_str(p.shape));
      if (loaded[i]) fail("{}: tensor '{}' appears twice", path, t.name);
      to_f32(t, ck.params.data(i), path);
      loaded[i] = true;
      if (!dtype_set) ck.dtype = t.dtype, dtype_set = true;
    }
  }
  for (size_t i = 0; i < loaded.size(); ++i)
    if (!loaded[i]) fail("{}: missing tensor '{}'", dir_s, ck.params.entries()[i].name);
  for (const auto& [name, file] : ck.shard_of)
    if (ck.params.index_of(name) < 0 && !(name == "lm_head.weight" && cfg.tie_word_embeddings))
      fail("{}: index lists unexpected tensor '{}'", index.string(), name);
  if (fs::exists(dir / "tokenizer.json")) ck.tokenizer_json = read_text_file(dir / "tokenizer.json");
  if (fs::exists(dir / "tokenizer_config.json"))
    ck.tokenizer_config_json = read_text_file(dir / "tokenizer_config.json");
  return ck;
}

namespace {
// The argument checks of save_checkpoint, before anything is written; errors name `label`.
void check_save_args(const std::string& label, const ParamTable& params, DType dtype,
                     const std::map<std::string, std::string>& shard_of) {
  if (dtype != DType::F32 && dtype != DType::BF16 && dtype != DType::F16)
    fail("{}: checkpoints are saved as F32, BF16 or F16, not {}", label, dtype_name(dtype));
  if (params.numel() == 0) fail("{}: the parameter table has no storage", label);
  if (!shard_of.empty())
    for (const ParamInfo& p : params.entries())
      if (!shard_of.count(p.name)) fail("{}: no shard given for tensor '{}'", label, p.name);
}
}  // namespace

void write_checkpoint_files(const std::string& dir_s, const ModelConfig& config, const ParamTable& params, DType dtype,
                            const std::map<std::string, std::string>& shard_of, const std::string& tokenizer_json,
                            const std::string& tokenizer_config_json) {
  check_save_args(dir_s, params, dtype, shard_of);
  const fs::path dir(dir_s);
  // Group tensors by shard, keeping the table's order within each.
  std::map<std::string, SafetensorsWriter> writers;
  for (const ParamInfo& p : params.entries()) {
    const std::string file = shard_of.empty() ? std::string("model.safetensors") : shard_of.at(p.name);
    writers[file].add(p.name, dtype, p.shape, from_f32(params.storage().data() + p.offset, p.numel, dtype));
  }
  for (auto& [file, w] : writers) {
    w.set_metadata({{"format", "pt"}});
    w.write((dir / file).string());
  }
  if (!shard_of.empty()) {
    nlohmann::json wm = nlohmann::json::object();
    for (const ParamInfo& p : params.entries()) wm[p.name] = shard_of.at(p.name);
    int64_t total = static_cast<int64_t>(params.numel() * dtype_size(dtype));
    write_file_atomic((dir / "model.safetensors.index.json").string(),
                      nlohmann::json{{"metadata", {{"total_size", total}}}, {"weight_map", wm}}.dump(2) + "\n");
  }
  nlohmann::json cj = config.to_json();
  cj["torch_dtype"] = cj["dtype"] = torch_dtype_name(dtype);
  write_file_atomic((dir / "config.json").string(), cj.dump(2) + "\n");
  if (!tokenizer_json.empty()) write_file_atomic((dir / "tokenizer.json").string(), tokenizer_json);
  if (!tokenizer_config_json.empty())
    write_file_atomic((dir / "tokenizer_config.json").string(), tokenizer_config_json);
}

void save_checkpoint(const std::string& dir_s, const ModelConfig& config, const ParamTable& params, DType dtype,
                     const std::map<std::string, std::string>& shard_of, const std::string& tokenizer_json,
                     const std::string& tokenizer_config_json) {
  check_save_args(dir_s, params, dtype, shard_of);
  write_dir_atomic(dir_s, [&](const std::string& tmp) {
    write_checkpoint_files(tmp, config, params, dtype, shard_of, tokenizer_json, tokenizer_config_json);
  });
}

void save_checkpoint(const std::string& dir, const Checkpoint& ck) {
  save_checkpoint(dir, ck.config, ck.params, ck.dtype, ck.shard_of, ck.tokenizer_json, ck.tokenizer_config_json);
}

}  // namespace mxrl
