// mxrl bench decode: prefill and decode tokens/s of a random model shaped
// like a preset or like Qwen3-0.6B, under several plans and batch sizes, with
// the memory bandwidth decode achieves beside a memcpy measured in the same
// run on the same threads. The first plan is the baseline for ratios.
//
// Prefill: B prompts of --prompt-len tokens in one forward call, logits for
// the last row of each sequence only. Decode: --steps forward calls of one
// token per sequence (the KV cache reserved beforehand, so no step grows it);
// the step time is the median, tokens/s = B / step time. The plans' models
// are all prepared first and measured interleaved (prefill repetition by
// repetition, decode step by step), so that other load on the machine falls
// on them alike. Prepare (cold, into fresh pages) and re-prepare (warm, a
// weight sync's rebuild) are medians of 3 builds, plans interleaved too.
//
// Bytes read per decode step: the packed weights of every linear the step
// runs (for MoE layers, the expected number of distinct experts B tokens
// route to under uniform routing, E (1 - (1 - k/E)^B)) plus the keys and
// values attention reads (FP32: an +fp8kv plan's cache is emulated and holds
// FP32 values too). The references, measured before and after
// (the better kept): memcpy GB/s counts the bytes copied (each read once and
// written once), read GB/s a read-only pass over the same buffer.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "bench/bench.h"
#include "bench/bench_util.h"
#include "kernels/gemm/gemm.h"
#include "model/forward.h"
#include "model/init.h"
#include "tokenizer/tokenizer.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/progress.h"
#include "util/splitmix.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
// The heap's free memory back to the kernel (mxrl keeps freed memory,
// cli/main.cc), so that the next allocations are served fresh pages.
void return_free_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}
}  // namespace

// A cheap deterministic stand-in for init_params (normal draws are slow at
// 0.6B): uniform values of the same standard deviation, from a hash of the
// storage index; norm weights 1, output projections scaled as init_params does.
void fill_params(ParamTable& params, ThreadPool& pool, float std) {
  const float out_scale = 1.0f / std::sqrt(2.0f * static_cast<float>(params.config().num_hidden_layers));
  for (size_t i = 0; i < params.entries().size(); ++i) {
    const ParamInfo& p = params.entries()[i];
    float* w = params.data(static_cast<int>(i));
    if (p.role == ParamRole::Norm) {
      std::fill(w, w + p.numel, 1.0f);
      continue;
    }
    const bool out_proj = p.role == ParamRole::Linear && (p.linear == LinearKind::O || p.linear == LinearKind::Down);
    const float a = (out_proj ? std * out_scale : std) * std::sqrt(3.0f);  // U(-a, a) has std a / sqrt(3)
    const uint64_t base = static_cast<uint64_t>(p.offset);
    pool.parallel_for(
        p.numel,
        [&](int64_t b, int64_t e) {
          for (int64_t j = b; j < e; ++j) {
            const double u = static_cast<double>(splitmix64(base + j) >> 11) * 0x1.0p-53;  // [0, 1)
            w[j] = static_cast<float>((2.0 * u - 1.0) * a);
          }
        },
        1 << 16);
  }
}

namespace {
// Packed weight bytes of every linear, and those one decode step of `batch`
// tokens reads (MoE experts: the expected number of distinct experts).
struct WeightBytes {
  double total = 0, per_step = 0;
};
WeightBytes weight_bytes(const Model& model, int64_t batch) {
  const ModelConfig& c = model.config();
  WeightBytes w;
  for (const PreparedLinear* l : model.linears()) w.total += static_cast<double>(l->packed.bytes());
  const double E = static_cast<double>(c.num_experts), K = static_cast<double>(c.num_experts_per_tok);
  const double active = c.is_moe() ? E * (1.0 - std::pow(1.0 - K / E, static_cast<double>(batch))) : 0.0;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const PreparedLayer& L = model.layer(i);
    double b = 0;
    for (const PreparedLinear* l : {&L.q, &L.k, &L.v, &L.o}) b += static_cast<double>(l->packed.bytes());
    if (L.moe) {
      b += static_cast<double>(L.router.packed.bytes());
      double experts = 0;
      for (size_t e = 0; e < L.expert_gate.size(); ++e)
        experts += static_cast<double>(L.expert_gate[e].packed.bytes() + L.expert_up[e].packed.bytes() +
                                       L.expert_down[e].packed.bytes());
      b += experts / static_cast<double>(L.expert_gate.size()) * active;
    } else {
      for (const PreparedLinear* l : {&L.gate, &L.up, &L.down}) b += static_cast<double>(l->packed.bytes());
    }
    w.per_step += b;
  }
  w.per_step += static_cast<double>(model.lm_head().packed.bytes());
  return w;
}

// A buffer well beyond the last-level cache, all ones, for the reference
// bandwidths (made once per run; every read pass below reads it).
std::vector<uint64_t> bandwidth_buffer() {
  long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);  // may be the host's whole L3 in a VM
  if (llc <= 0) llc = 32L << 20;
  return std::vector<uint64_t>(std::clamp<int64_t>(4LL * llc, 256LL << 20, 1LL << 30) / 8, 1);
}

// One read-only pass over src, split over the pool's threads (its sum kept
// live so the reads stay).
void read_pass(ThreadPool& pool, const std::vector<uint64_t>& src) {
  std::atomic<uint64_t> sum{0};
  pool.parallel_for(
      static_cast<int64_t>(src.size()),
      [&](int64_t b, int64_t e) {
        const uint64_t* p = src.data();
        uint64_t s = 0;
        for (int64_t i = b; i < e; ++i) s += p[i];
        sum.fetch_add(s, std::memory_order_relaxed);
      },
      1 << 17);
  if (sum.load() == 0) fail("bench decode: read pass lost");  // src is all ones
}

// Reference bandwidths on src: memcpy (bytes copied per second: each is read
// once and written once) and a read-only pass (bytes read per second, as
// decode reads its weights).
struct Bandwidth {
  double memcpy_gbps = 0, read_gbps = 0;
  int64_t bytes = 0;
};
Bandwidth measure_bandwidth(ThreadPool& pool, const std::vector<uint64_t>& src) {
  const int64_t n = static_cast<int64_t>(src.size()), bytes = n * 8;
  std::vector<uint64_t> dst(n, 0);
  const double tc = time_median(
      [&] {
        pool.parallel_for(
            n, [&](int64_t b, int64_t e) { std::memcpy(dst.data() + b, src.data() + b, (e - b) * 8); }, 1 << 17);
      },
      0.3);
  const double tr = time_median([&] { read_pass(pool, src); }, 0.3);
  return {bytes / tc / 1e9, bytes / tr / 1e9, bytes};
}

struct DecodeResult {
  std::string plan;
  int64_t batch = 0;
  double prefill_s = 0, prefill_tps = 0;
  double step_s = 0, decode_tps = 0;
  double weight_bytes_step = 0, kv_bytes_step = 0, gbps = 0;
  double decode_vs_first = 0, prefill_vs_first = 0;
  double read_gbps = 0;  // the read pass interleaved with this batch's decode steps (median)
};
}  // namespace

void bench_decode(const BenchDecodeOptions& a) {
  // Everything that can be refused is refused before the slow parts.
  const ModelConfig cfg = shape_config(a.shape, builtin_char_tokenizer().vocab_size());
  std::vector<PrecisionPlan> plans;
  for (const std::string& p : a.plans) plans.push_back(PrecisionPlan::resolve(p));
  if (a.prompt_len + a.steps > cfg.max_position_embeddings)
    fail("bench decode: --prompt-len {} + --steps {} exceeds the {} positions of {}", a.prompt_len, a.steps,
         cfg.max_position_embeddings, a.shape);

  const nlohmann::json provenance = bench_provenance(a.pair_kernel);
  ThreadPool pool(a.threads);
  const Exec exec{&pool, Backend::Auto, a.pair_kernel};
  Progress progress;

  progress.show("  memory bandwidth");
  // Read before and after the plans, and again between decode steps (after
  // every plan's step): the reference measured beside the steps it is
  // compared with, since this machine's read rate can move by half between
  // the start and end of a run.
  const std::vector<uint64_t> read_buf = bandwidth_buffer();
  const Bandwidth bw0 = measure_bandwidth(pool, read_buf);

  progress.show(fmt::format("  init {} (random weights)", a.shape));
  auto t0 = Clock::now();
  ParamTable params(cfg);
  fill_params(params, pool);
  const double init_s = seconds_since(t0);

  // Every plan's model at once: the plans' measurements are interleaved
  // (prefill repetition by repetition, decode step by step), so that other
  // load on the machine falls on all of them alike.
  //
  // Cold prepare: a build into memory the kernel has yet to hand over, as a
  // fresh process's first build (mxrl keeps freed memory, so the heap's free
  // pages go back to the kernel before each build). Median of 3, plans
  // interleaved: measured once in plan order, the later plan paid for the
  // earlier one's (and the machine's) state, not for its own work — on a VM
  // a page's first touch costs microseconds, and how many depends on what
  // the machine did just before (measured: mxfp8 3.6 s after bf16, bf16 20 s
  // after mxfp8).
  const size_t np = plans.size();
  std::vector<std::unique_ptr<const Model>> models(np);
  std::vector<double> prepare_s(np), weight_total(np);
  {
    std::vector<std::vector<double>> t(np);
    for (int rep = 0; rep < 3; ++rep)
      for (size_t pi = 0; pi < np; ++pi) {
        progress.show(fmt::format("  {} {}: prepare {}", a.shape, a.plans[pi], rep + 1));
        models[pi].reset();
        return_free_memory();
        t0 = Clock::now();
        models[pi] = std::make_unique<const Model>(params, plans[pi], exec);
        t[pi].push_back(seconds_since(t0));
      }
    for (size_t pi = 0; pi < np; ++pi) prepare_s[pi] = median(t[pi]), weight_total[pi] = weight_bytes(*models[pi], 1).total;
  }

  std::vector<DecodeResult> res(np * a.batches.size());  // [plan][batch]
  for (size_t bi = 0; bi < a.batches.size(); ++bi) {
    const int64_t B = a.batches[bi];
    std::vector<std::unique_ptr<KvCache>> caches;
    std::vector<ForwardWorkspace> workspaces(np);  // one per plan, reused as the engine reuses its own
    std::vector<int> slots(B);
    for (size_t pi = 0; pi < np; ++pi) {
      caches.push_back(std::make_unique<KvCache>(cfg));
      for (auto& s : slots) s = caches.back()->add_sequence(), caches.back()->reserve(s, a.prompt_len + a.steps);
    }
    // Random prompts (the same for every plan), the logits of each last row.
    TokenBatch prefill;
    std::vector<int64_t> rows;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < a.prompt_len; ++t)
        prefill.add(static_cast<int32_t>(splitmix64(1000003ull * b + t) % cfg.vocab_size), slots[b], t);
      rows.push_back(prefill.size() - 1);
    }
    std::vector<float> logits(B * cfg.vocab_size);
    std::vector<std::vector<double>> tp(np), td(np);
    std::vector<double> tr;
    for (int64_t rep = 0; rep < a.prefill_reps; ++rep)
      for (size_t pi = 0; pi < np; ++pi) {
        progress.show(fmt::format("  {} batch {}: prefill {}/{} {}", a.shape, B, rep + 1, a.prefill_reps, a.plans[pi]));
        for (const int s : slots) caches[pi]->reset(s);
        const auto s0 = Clock::now();
        forward(*models[pi], *caches[pi], prefill, logits.data(), exec, &rows, nullptr, &workspaces[pi]);
        tp[pi].push_back(seconds_since(s0));
      }
    // Decode from the last prefill: one token per sequence and step.
    for (int64_t step = 0; step < a.steps; ++step) {
      TokenBatch d;
      for (int64_t b = 0; b < B; ++b)
        d.add(static_cast<int32_t>(splitmix64(7919ull * (b + 1) + 104729ull * step) % cfg.vocab_size), slots[b],
              a.prompt_len + step);
      for (size_t pi = 0; pi < np; ++pi) {
        progress.show(fmt::format("  {} batch {}: decode step {}/{} {}", a.shape, B, step + 1, a.steps, a.plans[pi]));
        const auto s0 = Clock::now();
        forward(*models[pi], *caches[pi], d, logits.data(), exec, nullptr, nullptr, &workspaces[pi]);
        td[pi].push_back(seconds_since(s0));
      }
      const auto s0 = Clock::now();
      read_pass(pool, read_buf);
      tr.push_back(seconds_since(s0));
    }
    // Attention at position p reads p + 1 keys and values per layer; the
    // mean over the steps is p = prompt_len + (steps - 1) / 2.
    const double positions = static_cast<double>(a.prompt_len) + static_cast<double>(a.steps + 1) / 2.0;
    const double kv_bytes = static_cast<double>(B) * static_cast<double>(cfg.num_hidden_layers) * 2.0 * positions *
                            static_cast<double>(cfg.kv_dim()) * sizeof(float);
    const double read_gbps_between = static_cast<double>(bw0.bytes) / median(tr) / 1e9;
    for (size_t pi = 0; pi < np; ++pi) {
      DecodeResult& r = res[pi * a.batches.size() + bi];
      r.plan = a.plans[pi];
      r.batch = B;
      r.prefill_s = median(tp[pi]);
      r.prefill_tps = static_cast<double>(B * a.prompt_len) / r.prefill_s;
      r.step_s = median(td[pi]);
      r.decode_tps = static_cast<double>(B) / r.step_s;
      r.weight_bytes_step = weight_bytes(*models[pi], B).per_step;
      r.kv_bytes_step = kv_bytes;
      r.gbps = (r.weight_bytes_step + r.kv_bytes_step) / r.step_s / 1e9;
      r.read_gbps = read_gbps_between;
      const DecodeResult& f = res[bi];  // the first plan at this batch
      r.decode_vs_first = r.decode_tps / f.decode_tps;
      r.prefill_vs_first = r.prefill_tps / f.prefill_tps;
    }
  }
  // Re-prepare: a weight sync drops the old model and builds the new one, so
  // its memory is no longer the process's first touch (the heap keeps what
  // the old model freed). Plans interleaved, median of 3.
  std::vector<double> reprepare_s(np);
  {
    std::vector<std::vector<double>> t(np);
    for (int rep = 0; rep < 3; ++rep)
      for (size_t pi = 0; pi < np; ++pi) {
        progress.show(fmt::format("  {} {}: re-prepare {}", a.shape, a.plans[pi], rep + 1));
        models[pi].reset();
        t0 = Clock::now();
        models[pi] = std::make_unique<const Model>(params, plans[pi], exec);
        t[pi].push_back(seconds_since(t0));
      }
    for (size_t pi = 0; pi < np; ++pi) reprepare_s[pi] = median(t[pi]);
  }
  models.clear();
  progress.show("  memory bandwidth");
  const Bandwidth bw1 = measure_bandwidth(pool, read_buf);
  progress.clear();
  // The better of the two measurements (before and after) is the reference.
  const double memcpy_gbps = std::max(bw0.memcpy_gbps, bw1.memcpy_gbps);
  const double read_gbps = std::max(bw0.read_gbps, bw1.read_gbps);

  const DecodeResult *bf16_1 = nullptr, *mx_1 = nullptr;
  for (const DecodeResult& r : res) {
    if (r.batch != 1) continue;
    if (r.plan == "bf16" && !bf16_1) bf16_1 = &r;
    if (r.plan == "mxfp8" && !mx_1) mx_1 = &r;
  }
  auto bytes_step = [](const DecodeResult& r) { return r.weight_bytes_step + r.kv_bytes_step; };

  const double MiB = 1 << 20;
  if (a.json) {
    nlohmann::json j = {{"bench", "decode"},
                        {"shape", a.shape},
                        {"params", params.numel()},
                        {"init_s", init_s},
                        {"prompt_len", a.prompt_len},
                        {"steps", a.steps},
                        {"prefill_reps", a.prefill_reps},
                        {"threads", pool.size()},
                        {"pair_kernel", pair_kernel_summary(a.pair_kernel)},
                        {"provenance", provenance},
                        {"memcpy_gbps", memcpy_gbps},
                        {"read_gbps", read_gbps},
                        {"bandwidth_buffer_bytes", bw0.bytes},
                        {"memcpy_gbps_before_after", {bw0.memcpy_gbps, bw1.memcpy_gbps}},
                        {"read_gbps_before_after", {bw0.read_gbps, bw1.read_gbps}},
                        {"baseline", a.plans.front()},
                        {"plans", nlohmann::json::array()},
                        {"results", nlohmann::json::array()}};
    for (size_t pi = 0; pi < np; ++pi)
      j["plans"].push_back({{"plan", a.plans[pi]},
                            {"weight_bytes", weight_total[pi]},
                            {"prepare_s", prepare_s[pi]},
                            {"reprepare_s", reprepare_s[pi]}});
    for (const DecodeResult& r : res)
      j["results"].push_back({{"plan", r.plan},
                              {"batch", r.batch},
                              {"prefill_s", r.prefill_s},
                              {"prefill_tokens_per_s", r.prefill_tps},
                              {"prefill_ratio_to_first", r.prefill_vs_first},
                              {"decode_step_s", r.step_s},
                              {"decode_tokens_per_s", r.decode_tps},
                              {"decode_ratio_to_first", r.decode_vs_first},
                              {"decode_weight_bytes_per_step", r.weight_bytes_step},
                              {"decode_kv_bytes_per_step", r.kv_bytes_step},
                              {"decode_gbps", r.gbps},
                              {"decode_ratio_to_memcpy", r.gbps / memcpy_gbps},
                              {"decode_ratio_to_read", r.gbps / read_gbps},
                              {"read_gbps_interleaved", r.read_gbps},
                              {"decode_ratio_to_read_interleaved", r.gbps / r.read_gbps}});
    if (bf16_1 && mx_1)
      j["mxfp8_over_bf16_batch1"] = {{"decode_tokens_per_s", mx_1->decode_tps / bf16_1->decode_tps},
                                     {"bytes_per_step", bytes_step(*mx_1) / bytes_step(*bf16_1)}};
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print(
      "bench decode: {} ({:.1f} M params, random init {:.2f} s), prompt {} tokens, {} decode steps, "
      "{} thread(s)\n{}",
      a.shape, params.numel() / 1e6, init_s, a.prompt_len, a.steps, pool.size(), bench_provenance_text(provenance));
  fmt::print("memcpy {:.2f} GB/s (bytes copied), read {:.2f} GB/s ({:.0f} MiB buffer, best of before/after)\n",
             memcpy_gbps, read_gbps, bw0.bytes / MiB);
  fmt::print("plans interleaved; prefill: median of {}, decode: median step; ratios to {} at the same batch\n",
             a.prefill_reps, a.plans.front());
  if (cfg.is_moe())
    fmt::print("MoE: expert bytes per step counted for E(1-(1-k/E)^B) distinct experts (uniform routing)\n");
  fmt::print("{:<14} {:>12} {:>10} {:>12} {:>6}\n", "plan", "weights MiB", "prepare s", "re-prepare s", "x 1st");
  for (size_t pi = 0; pi < np; ++pi)
    fmt::print("{:<14} {:>12.1f} {:>10.2f} {:>12.2f} {:>6.2f}\n", a.plans[pi], weight_total[pi] / MiB, prepare_s[pi],
               reprepare_s[pi], reprepare_s[pi] / reprepare_s[0]);
  fmt::print("{:<14} {:>5} {:>10} {:>6} {:>9} {:>8} {:>6} {:>9} {:>7} {:>7} {:>6} {:>7} {:>7}\n", "plan", "batch",
             "prefill/s", "x 1st", "decode/s", "step ms", "x 1st", "MiB/step", "GB/s", "x mcpy", "x read", "read-i",
             "x rd-i");
  for (const DecodeResult& r : res)
    fmt::print(
        "{:<14} {:>5} {:>10.1f} {:>6.2f} {:>9.1f} {:>8.2f} {:>6.2f} {:>9.1f} {:>7.2f} {:>7.2f} {:>6.2f} {:>7.2f} "
        "{:>7.2f}\n",
        r.plan, r.batch, r.prefill_tps, r.prefill_vs_first, r.decode_tps, r.step_s * 1e3, r.decode_vs_first,
        bytes_step(r) / MiB, r.gbps, r.gbps / memcpy_gbps, r.gbps / read_gbps, r.read_gbps, r.gbps / r.read_gbps);
  fmt::print("read-i: GB/s of the read pass run between decode steps (median); x rd-i: decode GB/s over it\n");
  if (bf16_1 && mx_1)
    fmt::print("batch 1, mxfp8 / bf16: decode tokens/s {:.2f}x for {:.2f}x the bytes read per step\n",
               mx_1->decode_tps / bf16_1->decode_tps, bytes_step(*mx_1) / bytes_step(*bf16_1));
}

}  // namespace mxrl
