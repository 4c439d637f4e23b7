#include "interop/compressed_tensors.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "kernels/gemm/gemm.h"
#include "model/checkpoint.h"
#include "model/precision.h"
#include "numerics/formats.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_read.h"
#include "util/text.h"

namespace mxrl {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool is_mxfp8_e4m3(const LinearPrecision& p) { return p.precision == Precision::MXFP8 && p.elem == ElemType::E4M3; }

// What compressed-tensors' MXFP8 preset scheme (quant_scheme.py MXFP8) says, as
// QuantizationConfig.model_dump() spells it (compressed-tensors 0.20), with
// the preset's zp_dtype, which model_dump writes only when given (without it
// the parsed scheme infers float8_e4m3fn, unused by a symmetric scheme but
// unequal to the preset).
json quantization_config() {
  const json args = {{"num_bits", 8},
                     {"type", "float"},
                     {"symmetric", true},
                     {"group_size", 32},
                     {"strategy", "group"},
                     {"dynamic", false},
                     {"scale_dtype", "torch.uint8"},
                     {"zp_dtype", "torch.uint8"}};
  json acts = args;
  acts["dynamic"] = true;
  return {{"quant_method", "compressed-tensors"},
          {"format", "mxfp8-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights", args},
              {"input_activations", acts},
              {"output_activations", nullptr},
              {"format", nullptr}}}}},
          {"ignore", {"lm_head", "re:.*mlp.gate$"}},
          {"kv_cache_scheme", nullptr},
          {"global_compression_ratio", nullptr}};
}

json read_config_json(const std::string& dir) {
  const fs::path p = fs::path(dir) / "config.json";
  return json_parse(read_text_file(p), p.string());
}

std::vector<std::byte> bf16_bytes(const float* v, int64_t n) {
  std::vector<std::byte> out(static_cast<size_t>(n) * 2);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_bf16(v[i]);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

template <typename T>
std::vector<T> copy_as(const TensorView& t) {
  std::vector<T> v(t.data.size() / sizeof(T));
  std::memcpy(v.data(), t.data.data(), v.size() * sizeof(T));
  return v;
}

}  // namespace

bool is_compressed_tensors(const std::string& dir) {
  const fs::path p = fs::path(dir) / "config.json";
  if (!fs::exists(p)) return false;
  json j;
  try {
    j = json::parse(read_text_file(p));
  } catch (const json::exception&) {
    return false;  // load_checkpoint reports it
  }
  if (!j.is_object() || !j.contains("quantization_config") || !j["quantization_config"].is_object()) return false;
  const json& q = j["quantization_config"];
  return q.contains("quant_method") && q["quant_method"] == "compressed-tensors";
}

void export_compressed_tensors(const Model& model, const std::string& tokenizer_json,
                               const std::string& tokenizer_config_json, const std::string& out_dir) {
  const ModelConfig& cfg = model.config();
  const PrecisionPlan& plan = model.plan();
  const ParamTable layout(cfg, /*allocate=*/false);
  auto refuse = [&](const std::string& name, const LinearPrecision& have, const char* want) {
    fail("export compressed-tensors: {} is {} under plan {}; the mxfp8-quantized format holds {}", name, have.str(),
         plan.name, want);
  };
  if (!plan.bf16_embeddings)
    fail("export compressed-tensors: embeddings and norms are fp32 under plan {}; the format holds them in bf16",
         plan.name);
  for (const ParamInfo& p : layout.entries()) {
    if (p.role != ParamRole::Linear) continue;
    const LinearPrecision lp = plan.for_param(p);
    const bool high = p.linear == LinearKind::Router || p.linear == LinearKind::LmHead;
    if (high && lp.precision != Precision::BF16) refuse(p.name, lp, "bf16 (ignored by the quantization)");
    if (!high && !is_mxfp8_e4m3(lp)) refuse(p.name, lp, "mxfp8(e4m3) for every decoder linear");
  }
  if (cfg.tie_word_embeddings && plan.lm_head.precision != Precision::BF16)
    refuse("lm_head.weight (tied)", plan.lm_head, "bf16");

  const WeightShipment s = model.ship();
  SafetensorsWriter w;
  for (const ParamInfo& p : layout.entries()) {
    if (p.role != ParamRole::Linear) {
      const std::vector<float>& v = s.copies.at(p.name);
      w.add(p.name, DType::BF16, p.shape, bf16_bytes(v.data(), p.numel));
      continue;
    }
    const PreparedLinear& L = s.linears.at(p.name);
    if (L.prec.precision == Precision::BF16) {
      std::vector<std::byte> b(L.bf16.size() * 2);
      std::memcpy(b.data(), L.bf16.data(), b.size());
      w.add(p.name, DType::BF16, p.shape, std::move(b));
      continue;
    }
    std::vector<std::byte> codes(L.codes.size()), scales(L.mx_scales.size());
    std::memcpy(codes.data(), L.codes.data(), codes.size());
    std::memcpy(scales.data(), L.mx_scales.data(), scales.size());
    w.add(p.name, DType::F8_E4M3, {L.n, L.k}, std::move(codes));
    w.add(p.name + "_scale", DType::U8, {L.n, L.k / 32}, std::move(scales));  // X.weight -> X.weight_scale
  }
  w.set_metadata({{"format", "pt"},
                  {"mxrl.plan", plan.name},
                  {"mxrl.scale_rule", scale_rule_name(plan.decoder.rule)},
                  {"mxrl.decoder", plan.decoder.str()}});
  json cj = cfg.to_json();
  cj["torch_dtype"] = cj["dtype"] = "bfloat16";
  cj["quantization_config"] = quantization_config();
  write_dir_atomic(out_dir, [&](const std::string& tmp) {
    w.write((fs::path(tmp) / "model.safetensors").string());
    write_file_atomic((fs::path(tmp) / "config.json").string(), cj.dump(2) + "\n");
    if (!tokenizer_json.empty()) write_file_atomic((fs::path(tmp) / "tokenizer.json").string(), tokenizer_json);
    if (!tokenizer_config_json.empty())
      write_file_atomic((fs::path(tmp) / "tokenizer_config.json").string(), tokenizer_config_json);
  });
}

ParamTable computed_values(const Model& model) {
  ParamTable t(model.config());
  const WeightShipment s = model.ship();
  for (size_t i = 0; i < t.entries().size(); ++i) {
    const ParamInfo& p = t.entries()[i];
    float* dst = t.data(static_cast<int>(i));
    if (p.role != ParamRole::Linear) {
      const std::vector<float>& v = s.copies.at(p.name);
      std::copy(v.begin(), v.end(), dst);
      continue;
    }
    const PreparedLinear& L = s.linears.at(p.name);
    const WeightView v = L.view();
    for (int64_t n = 0; n < L.n; ++n)
      for (int64_t k = 0; k < L.k; ++k) dst[n * L.k + k] = weight_value(v, n, k);
  }
  return t;
}

ModelConfig load_model_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  if (!is_compressed_tensors(dir)) return ModelConfig::load(path);
  json j = read_config_json(dir);
  j.erase("quantization_config");
  return ModelConfig::from_json(j, path);
}

TokenizerFiles load_tokenizer_files(const std::string& dir) {
  TokenizerFiles t;
  const fs::path d(dir);
  if (fs::exists(d / "tokenizer.json")) t.tokenizer_json = read_text_file(d / "tokenizer.json");
  if (fs::exists(d / "tokenizer_config.json")) t.tokenizer_config_json = read_text_file(d / "tokenizer_config.json");
  return t;
}

Model load_model(const std::string& dir, const PrecisionPlan& plan, const Exec& exec) {
  if (!is_compressed_tensors(dir)) return Model(load_checkpoint(dir).params, plan, exec);
  const std::string cfg_path = (fs::path(dir) / "config.json").string();
  json j = read_config_json(dir);
  const json q = j["quantization_config"];
  const std::string format = q.contains("format") && q["format"].is_string() ? q["format"].get<std::string>() : "";
  if (format != "mxfp8-quantized")
    fail("{}: quantization_config.format {} is not supported (mxrl loads compressed-tensors \"mxfp8-quantized\")",
         cfg_path, q.contains("format") ? q["format"].dump() : std::string("(missing)"));
  const ModelConfig cfg = load_model_config(dir);
  const ParamTable layout(cfg, /*allocate=*/false);

  // The files: model.safetensors, or the shards of the index.
  std::vector<std::string> files;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(index)) {
    const json ij = json_parse(read_text_file(index), index.string());
    if (!ij.contains("weight_map") || !ij["weight_map"].is_object()) fail("{}: no weight_map object", index.string());
    std::set<std::string> seen;
    for (auto& [name, f] : ij["weight_map"].items()) {
      if (!f.is_string() || f.get<std::string>().find('/') != std::string::npos)
        fail("{}: weight_map entry '{}' is not a file name in the directory", index.string(), name);
      if (seen.insert(f.get<std::string>()).second) files.push_back(f.get<std::string>());
    }
  } else {
    files.push_back("model.safetensors");
  }
  std::vector<SafetensorsFile> opened;
  std::map<std::string, std::pair<const TensorView*, std::string>> tensors;  // name -> (view, file)
  for (const std::string& f : files) opened.push_back(SafetensorsFile::open((fs::path(dir) / f).string()));
  for (const SafetensorsFile& f : opened)
    for (const TensorView& t : f.tensors()) {
      if (tensors.count(t.name)) fail("{}: tensor '{}' appears twice", f.path(), t.name);
      tensors[t.name] = {&t, f.path()};
    }
  std::set<std::string> used;
  auto held_as = [&](const std::string& name, const std::string& held, const LinearPrecision& want) {
    fail("{}: {} is held as {}, but plan {} computes it as {}", dir, name, held, plan.name, want.str());
  };
  WeightShipment s;
  for (const ParamInfo& p : layout.entries()) {
    auto it = tensors.find(p.name);
    if (it == tensors.end()) fail("{}: missing tensor '{}'", dir, p.name);
    const TensorView& t = *it->second.first;
    const std::string& file = it->second.second;
    used.insert(p.name);
    if (t.shape != p.shape)
      fail("{}: tensor '{}' has shape {}, the config needs {}", file, p.name, shape_str(t.shape), shape_str(p.shape));
    if (p.role != ParamRole::Linear) {
      if (t.dtype != DType::BF16) fail("{}: tensor '{}' is {}, expected BF16", file, p.name, dtype_name(t.dtype));
      if (!plan.bf16_embeddings)
        fail("{}: {} is held as bf16, but plan {} computes it as fp32", dir, p.name, plan.name);
      std::vector<float>& v = s.copies[p.name];
      v.resize(p.numel);
      for (int64_t i = 0; i < p.numel; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data.data() + 2 * i, 2);
        v[i] = bf16_to_f32(h);
      }
      continue;
    }
    const LinearPrecision want = plan.for_param(p);
    PreparedLinear L;
    L.name = p.name, L.n = p.shape[0], L.k = p.shape[1];
    if (t.dtype == DType::BF16) {
      if (want.precision != Precision::BF16) held_as(p.name, "bf16", want);
      L.prec = want;
      L.bf16 = copy_as<uint16_t>(t);
    } else if (t.dtype == DType::F8_E4M3) {
      const std::string sname = p.name + "_scale";
      auto si = tensors.find(sname);
      if (si == tensors.end()) fail("{}: tensor '{}' has no '{}'", file, p.name, sname);
      const TensorView& sc = *si->second.first;
      used.insert(sname);
      const std::vector<int64_t> sshape = {L.n, L.k / 32};
      if ((sc.dtype != DType::U8 && sc.dtype != DType::F8_E8M0) || sc.shape != sshape || L.k % 32 != 0)
        fail("{}: tensor '{}' is {} {}; an MXFP8 weight [{}, {}] has U8 scales {}", si->second.second, sname,
             dtype_name(sc.dtype), shape_str(sc.shape), L.n, L.k, shape_str(sshape));
      if (!is_mxfp8_e4m3(want)) held_as(p.name, "mxfp8(e4m3)", want);
      L.prec = want;  // the scale rule is the plan's: the bytes do not carry it
      L.codes = copy_as<uint8_t>(t);
      L.mx_scales = copy_as<uint8_t>(sc);
    } else {
      fail("{}: tensor '{}' has dtype {}; a compressed-tensors mxfp8 model holds F8_E4M3 (+ U8 scales) or BF16", file,
           p.name, dtype_name(t.dtype));
    }
    s.linears.emplace(p.name, std::move(L));
  }
  if (cfg.tie_word_embeddings) {  // the head computes with the (BF16) embedding
    const ParamInfo& e = layout.entries()[layout.embed()];
    if (plan.lm_head.precision != Precision::BF16) held_as("lm_head.weight (tied)", "bf16", plan.lm_head);
    PreparedLinear L;
    L.name = e.name, L.n = e.shape[0], L.k = e.shape[1], L.prec = plan.lm_head;
    L.bf16 = copy_as<uint16_t>(*tensors.at(e.name).first);
    s.linears.emplace(e.name, std::move(L));
    used.insert("lm_head.weight");  // a tied duplicate, if written
  }
  for (const auto& [name, v] : tensors)
    if (!used.count(name)) fail("{}: unexpected tensor '{}' for a {} with this config", v.second, name, cfg.model_type);
  return Model::from_shipment(cfg, plan, s, exec);
}

}  // namespace mxrl
