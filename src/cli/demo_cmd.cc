// mxrl demo: the main job until the RL loop lands. Writes a BF16 checkpoint
// shaped like the tiny Qwen3 preset (random weights with outliers), then
// quantizes it to every MX element type under both scale rules through the
// same file paths as `mxrl quantize` / `mxrl dequantize`, and reports the
// error of each against the original.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>

#include "cli/commands.h"
#include "io/mx_file.h"
#include "io/safetensors.h"
#include "util/thread_pool.h"

namespace mxrl::cli {

namespace {
struct DemoArgs {
  std::string out = "mxrl-demo";
  int threads = 0;
  uint64_t seed = 0;
};

std::vector<float> read_f32(const st::TensorView& t) {
  std::vector<float> v(t.numel());
  if (t.dtype == st::DType::F32) {
    std::memcpy(v.data(), t.data.data(), v.size() * 4);
  } else {  // BF16
    for (size_t i = 0; i < v.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, t.data.data() + 2 * i, 2);
      v[i] = bf16_to_f32(h);
    }
  }
  return v;
}

// A checkpoint shaped like tiny-dense: hidden 256, 4 layers, 8 query / 2 KV
// heads of 32, MLP 768, vocab 512; N(0, 0.02) weights with rare 20x outliers.
void write_model(const std::string& path, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0, 0.02f);
  std::uniform_real_distribution<float> u(0, 1);
  st::Writer w;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float mean = 0) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<std::byte> data(n * 2);
    for (int64_t i = 0; i < n; ++i) {
      float v = mean + nd(rng) * (u(rng) < 1e-3f ? 20.0f : 1.0f);
      const uint16_t h = f32_to_bf16(v);
      std::memcpy(&data[2 * i], &h, 2);
    }
    w.add(name, st::DType::BF16, std::move(shape), std::move(data));
  };
  const int64_t H = 256, L = 4, Q = 8 * 32, KV = 2 * 32, F = 768, V = 512;
  add("model.embed_tokens.weight", {V, H});
  for (int64_t i = 0; i < L; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    add(p + "input_layernorm.weight", {H}, 1.0f);
    add(p + "self_attn.q_proj.weight", {Q, H});
    add(p + "self_attn.k_proj.weight", {KV, H});
    add(p + "self_attn.v_proj.weight", {KV, H});
    add(p + "self_attn.o_proj.weight", {H, Q});
    add(p + "self_attn.q_norm.weight", {32}, 1.0f);
    add(p + "self_attn.k_norm.weight", {32}, 1.0f);
    add(p + "post_attention_layernorm.weight", {H}, 1.0f);
    add(p + "mlp.gate_proj.weight", {F, H});
    add(p + "mlp.up_proj.weight", {F, H});
    add(p + "mlp.down_proj.weight", {H, F});
  }
  add("model.norm.weight", {H}, 1.0f);
  w.set_metadata({{"format", "pt"}, {"mxrl.demo_seed", std::to_string(seed)}});
  w.write(path);
}

void run_demo(const DemoArgs& a) {
  namespace fs = std::filesystem;
  fs::create_directories(a.out);
  ThreadPool pool(a.threads);
  const std::string model = (fs::path(a.out) / "model.safetensors").string();
  write_model(model, a.seed);
  const st::File orig = st::File::open(model);
  int64_t params = 0;
  for (const auto& t : orig.tensors()) params += t.numel();
  fmt::print("demo: wrote {} ({} tensors, {:.2f} M BF16 parameters); {} thread(s), {} backend\n\n",
             model, orig.tensors().size(), params / 1e6, pool.size(),
             backend_name(resolve_backend(Backend::Auto)));
  fmt::print("{:<6} {:<6} {:>9} {:>10} {:>11} {:>9} {:>9}\n", "elem", "rule", "SQNR dB", "rel RMSE",
             "max |err|", "MB", "ms");
  for (ElemType e : kAllElemTypes)
    for (ScaleRule r : {ScaleRule::Floor, ScaleRule::RCeil}) {
      const std::string tag = fmt::format("{}-{}", elem_traits(e).name, scale_rule_name(r));
      const std::string qpath = (fs::path(a.out) / (tag + ".safetensors")).string();
      const std::string dpath = (fs::path(a.out) / (tag + ".dequant.safetensors")).string();
      const auto t0 = std::chrono::steady_clock::now();
      const MxFileStats qs = quantize_file(model, qpath, {e, r}, {&pool});
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      dequantize_file(qpath, dpath, {&pool});
      const st::File deq = st::File::open(dpath);
      double sig = 0, noise = 0, max_err = 0;
      for (const auto& t : orig.tensors()) {
        const auto x = read_f32(t), y = read_f32(deq.at(t.name));
        for (size_t i = 0; i < x.size(); ++i) {
          const double d = double(y[i]) - x[i];
          sig += double(x[i]) * x[i];
          noise += d * d;
          max_err = std::max(max_err, std::fabs(d));
        }
      }
      fmt::print("{:<6} {:<6} {:>9.2f} {:>10.5f} {:>11.5f} {:>9.2f} {:>9.1f}\n", elem_traits(e).name,
                 scale_rule_name(r), 10 * std::log10(sig / noise), std::sqrt(noise / sig), max_err,
                 qs.bytes_out / 1e6, ms);
    }
  fmt::print("\noriginal {:.2f} MB (BF16); quantized files and their F32 dequantizations are in {}/\n",
             params * 2 / 1e6, a.out);
}
}  // namespace

void add_demo_command(CLI::App& app) {
  auto args = std::make_shared<DemoArgs>();
  auto* d = app.add_subcommand("demo", "Quantize a generated tiny-model checkpoint to every MX format and report the error");
  d->add_option("--out", args->out, "Output directory")->capture_default_str();
  d->add_option("--seed", args->seed, "Seed of the generated weights")->capture_default_str();
  add_threads_option(d, &args->threads);
  d->callback([args] { run_demo(*args); });
}

}  // namespace mxrl::cli
