// mxrl init: a randomly initialised checkpoint (config.json, safetensors,
// tokenizer.json) from a preset or a TOML config.
#include <fmt/format.h>
#include <toml++/toml.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "interop/compressed_tensors.h"
#include "model/checkpoint.h"
#include "model/init.h"
#include "tokenizer/tokenizer.h"
#include "train/warm_start.h"
#include "util/error.h"

namespace mxrl {

namespace {
struct InitArgs {
  std::string preset, config, from, out, dtype = "f32";
  uint64_t seed = 0;
  float std = 0.02f;
};

// A TOML model config: the fields of config.json, e.g.
//   model_type = "qwen3"  hidden_size = 256  num_hidden_layers = 4 ...
// (vocab_size defaults to the character tokenizer's).
ModelConfig config_from_toml(const std::string& path, int64_t vocab) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    fail("{}: invalid TOML at line {}: {}", path, e.source().begin.line, e.description());
  }
  nlohmann::json j = nlohmann::json::object();
  for (auto& [k, v] : t) {
    if (auto i = v.value<int64_t>(); i && v.is_integer())
      j[std::string(k.str())] = *i;
    else if (auto d = v.value<double>(); d && v.is_floating_point())
      j[std::string(k.str())] = *d;
    else if (auto b = v.value<bool>(); b && v.is_boolean())
      j[std::string(k.str())] = *b;
    else if (auto s = v.value<std::string>(); s && v.is_string())
      j[std::string(k.str())] = *s;
    else if (const toml::array* a = v.as_array()) {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& x : *a) {
        const auto* xi = x.as_integer();  // not value<int64_t>(), which also takes 2.0
        if (!xi) fail("{}: '{}' must be an array of integers", path, k.str());
        arr.push_back(xi->get());
      }
      j[std::string(k.str())] = arr;
    } else {
      fail("{}: unsupported value for '{}'", path, k.str());
    }
  }
  if (!j.contains("vocab_size")) j["vocab_size"] = vocab;
  if (!j.contains("model_type")) j["model_type"] = "qwen3";
  return ModelConfig::from_json(j, path);
}

// A trainable checkpoint from a plain or compressed-tensors directory: the
// exact FP32 values the model computes with (compressed-tensors: MXFP8 codes
// times their scales, BF16 tensors widened), stored in --dtype.
void run_init_from(const InitArgs& a) {
  const bool ct = is_compressed_tensors(a.from);
  const TokenizerFiles tok = load_tokenizer_files(a.from);
  const ParamTable params =
      ct ? computed_values(load_model(a.from, PrecisionPlan::named("mxfp8"))) : load_checkpoint(a.from).params;
  const DType dtype = a.dtype == "bf16" ? DType::BF16 : DType::F32;
  save_checkpoint(a.out, params.config(), params, dtype, {}, tok.tokenizer_json, tok.tokenizer_config_json);
  fmt::print(stderr, "wrote {}: {} from {} ({}), {:.2f} M parameters\n", a.out, dtype_name(dtype), a.from,
             ct ? "compressed-tensors mxfp8, dequantized exactly" : "checkpoint", params.numel() / 1e6);
}

void run_init(const InitArgs& a) {
  if (!a.from.empty()) {
    if (!a.preset.empty() || !a.config.empty()) fail("give exactly one of --preset, --config or --from");
    return run_init_from(a);
  }
  if (a.preset.empty() == a.config.empty()) fail("give exactly one of --preset, --config or --from");
  const int64_t vocab = builtin_char_tokenizer().vocab_size();
  const ModelConfig cfg = a.preset.empty() ? config_from_toml(a.config, vocab) : preset_config(a.preset, vocab);
  const int64_t numel = init_checkpoint(a.out, cfg, a.seed, a.std, a.dtype == "bf16" ? DType::BF16 : DType::F32);
  fmt::print(stderr, "wrote {}: {} ({} layers, hidden {}, {}), {:.2f} M parameters, vocab {}, seed {}\n", a.out,
             cfg.model_type, cfg.num_hidden_layers, cfg.hidden_size,
             cfg.is_moe() ? fmt::format("{} experts top-{}", cfg.num_experts, cfg.num_experts_per_tok) : "dense",
             numel / 1e6, cfg.vocab_size, a.seed);
}
}  // namespace

void add_init_command(CLI::App& app) {
  auto a = std::make_shared<InitArgs>();
  auto* c = app.add_subcommand("init", "Write a randomly initialised checkpoint (preset or TOML config)");
  c->add_option("--preset", a->preset, "Preset model")->check(CLI::IsMember(preset_names()));
  c->add_option("--config", a->config, "TOML file with config.json fields")->check(CLI::ExistingFile);
  c->add_option("--from", a->from,
                "Instead of initialising: a plain or compressed-tensors MXFP8 directory whose computed values "
                "(dequantized exactly) become the checkpoint")
      ->check(CLI::ExistingDirectory);
  c->add_option("--out", a->out, "Output checkpoint directory")->required();
  c->add_option("--seed", a->seed, "Initialisation seed")->capture_default_str();
  c->add_option("--init-std", a->std, "Std of the normal initialisation")->check(positive())->capture_default_str();
  c->add_option("--dtype", a->dtype, "Stored dtype")->check(CLI::IsMember({"f32", "bf16"}))->capture_default_str();
  c->callback([a] { run_init(*a); });
}

}  // namespace mxrl
