// mxrl quantize / mxrl dequantize: safetensors <-> MX codes and E8M0 scales.
#include <fmt/format.h>

#include <chrono>
#include <map>

#include "cli/commands.h"
#include "interop/mx_file.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/run_dir.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
struct QuantizeArgs {
  std::string in, out, elem, rule, axis = "row", round = "rne";
  uint64_t seed = 0;
  int threads = 0;
};
}  // namespace

void add_quantize_commands(CLI::App& app) {
  auto args = std::make_shared<QuantizeArgs>();
  auto* q = app.add_subcommand("quantize", "Quantize every tensor of a safetensors file to MX");
  q->add_option("IN", args->in, "Input .safetensors (F32, BF16 or F16 tensors)")->required()->check(CLI::ExistingFile);
  q->add_option("OUT", args->out, "Output .safetensors (codes X and scales X_scale)")->required();
  q->add_option("--elem", args->elem, "Element type")
      ->required()
      ->check(CLI::IsMember({"e4m3", "e5m2", "e3m2", "e2m3", "e2m1"}));
  q->add_option("--scale-rule", args->rule, "E8M0 scale rule")->required()->check(CLI::IsMember({"floor", "rceil"}));
  q->add_option("--axis", args->axis, "Block axis: row (1x32 along the last dim) or col (32x1 along the first)")
      ->check(CLI::IsMember({"row", "col"}))
      ->capture_default_str();
  auto* round = q->add_option("--round", args->round, "Rounding: rne or stochastic (seeded, counter-based)")
                    ->check(CLI::IsMember({"rne", "stochastic"}))
                    ->capture_default_str();
  q->add_option("--seed", args->seed, "Seed for stochastic rounding")->needs(round);
  add_threads_option(q, &args->threads);
  q->callback([args] {
    if (args->round == "rne" && args->seed != 0) fail("--seed applies only with --round stochastic");
    MxConfig cfg;
    cfg.elem = *elem_from_name(args->elem);
    cfg.rule = args->rule == "floor" ? ScaleRule::Floor : ScaleRule::RCeil;
    cfg.axis = args->axis == "row" ? Axis::Row : Axis::Col;
    cfg.round = args->round == "rne" ? Rounding::RNE : Rounding::Stochastic;
    cfg.seed = args->seed;
    ThreadPool pool(args->threads);
    const auto t0 = std::chrono::steady_clock::now();
    make_parent_dirs(args->out);
    const MxFileStats s = quantize_file(args->in, args->out, cfg, {&pool});
    fmt::print(stderr, "quantized {} tensors ({} values) to {} {} {}: {:.1f} MB -> {:.1f} MB in {:.2f} s\n", s.tensors,
               s.elements, args->elem, args->rule, args->axis, s.bytes_in / 1e6, s.bytes_out / 1e6, seconds_since(t0));
  });

  auto dargs = std::make_shared<QuantizeArgs>();
  auto* d = app.add_subcommand("dequantize", "Dequantize an MX file written by 'mxrl quantize' to F32");
  d->add_option("IN", dargs->in, "Input .safetensors from mxrl quantize")->required()->check(CLI::ExistingFile);
  d->add_option("OUT", dargs->out, "Output .safetensors (F32, original names)")->required();
  add_threads_option(d, &dargs->threads);
  d->callback([dargs] {
    ThreadPool pool(dargs->threads);
    const auto t0 = std::chrono::steady_clock::now();
    make_parent_dirs(dargs->out);
    const MxFileStats s = dequantize_file(dargs->in, dargs->out, {&pool});
    fmt::print(stderr, "dequantized {} tensors ({} values) in {:.2f} s\n", s.tensors, s.elements, seconds_since(t0));
  });
}

}  // namespace mxrl
