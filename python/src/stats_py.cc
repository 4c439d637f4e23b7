// mxrl.stats and mxrl.tasks: what an experiment over another engine needs to
// measure exactly as mxrl's own experiments do — the held-out problems of a
// task, the per-token mismatch sums of experiments/matching.h (exact KL from
// full rows, k3, |dlogp|, tokens that differ at all) and its bootstrap
// intervals over prompts.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "arrays.h"
#include "experiments/matching.h"
#include "tasks/tasks.h"

namespace mxrl {

namespace {

// One sample's sums: sampler and learner rows [T, V] (logits or log-probs; each
// row is log-softmaxed here at `temperature`), the sampled tokens [T].
nb::dict match_sums(const AnyArray& sampler, const AnyArray& learner, const std::vector<int32_t>& tokens,
                    double temperature) {
  require_f32(sampler, "sampler rows");
  require_f32(learner, "learner rows");
  require_contiguous(sampler, "sampler rows");
  require_contiguous(learner, "learner rows");
  if (sampler.ndim() != 2 || learner.ndim() != 2)
    throw nb::value_error("match_sums: sampler and learner rows must be 2-D [tokens, vocab]");
  const int64_t T = static_cast<int64_t>(sampler.shape(0)), V = static_cast<int64_t>(sampler.shape(1));
  if (static_cast<int64_t>(learner.shape(0)) != T || static_cast<int64_t>(learner.shape(1)) != V ||
      static_cast<int64_t>(tokens.size()) != T)
    throw nb::value_error(fmt::format("match_sums: sampler rows {}, learner rows {} and {} tokens do not match",
                                      shape_str(shape_of(sampler)), shape_str(shape_of(learner)), tokens.size())
                              .c_str());
  const float* s = static_cast<const float*>(sampler.data());
  const float* l = static_cast<const float*>(learner.data());
  for (int64_t t = 0; t < T; ++t)
    if (tokens[t] < 0 || tokens[t] >= V)
      throw nb::value_error(fmt::format("match_sums: token {} at {} outside [0, {})", tokens[t], t, V).c_str());
  PromptSums p;
  {
    nb::gil_scoped_release unlocked;
    std::vector<float> scratch;
    add_sample(p, s, l, tokens.data(), T, V, static_cast<float>(temperature), scratch);
  }
  nb::dict out;
  out["tokens"] = p.tokens;
  out["kl"] = p.kl;
  out["k3"] = p.k3;
  out["abs_dlogp"] = p.abs_dlogp;
  out["abs_dlogp_max"] = p.abs_dlogp_max;
  out["unequal"] = p.unequal;
  return out;
}

std::vector<PromptSums> sums_of(const std::vector<int64_t>& tokens, const std::vector<double>& kl, const char* what) {
  if (tokens.size() != kl.size())
    throw nb::value_error(fmt::format("{}: {} token counts for {} KL sums", what, tokens.size(), kl.size()).c_str());
  std::vector<PromptSums> p(tokens.size());
  for (size_t i = 0; i < p.size(); ++i) {
    if (tokens[i] < 0) throw nb::value_error(fmt::format("{}: token count {} < 0", what, tokens[i]).c_str());
    p[i].tokens = tokens[i], p[i].kl = kl[i];
  }
  return p;
}

std::tuple<double, double, double> bootstrap_mean_py(const std::vector<int64_t>& tokens, const std::vector<double>& kl,
                                                     int64_t reps, uint64_t seed) {
  const Interval i = bootstrap_mean(sums_of(tokens, kl, "bootstrap_mean"), &PromptSums::kl, reps, seed);
  return {i.mean, i.lo, i.hi};
}

std::tuple<double, double, double> bootstrap_ratio_py(const std::vector<int64_t>& tokens_a,
                                                      const std::vector<double>& kl_a,
                                                      const std::vector<int64_t>& tokens_b,
                                                      const std::vector<double>& kl_b, int64_t reps, uint64_t seed) {
  if (tokens_a.size() != tokens_b.size())
    throw nb::value_error("bootstrap_ratio: a and b must cover the same prompts (paired bootstrap)");
  const Interval i = bootstrap_ratio(sums_of(tokens_a, kl_a, "bootstrap_ratio a"),
                                     sums_of(tokens_b, kl_b, "bootstrap_ratio b"), reps, seed);
  return {i.mean, i.lo, i.hi};
}

std::vector<std::tuple<std::string, std::string>> problems(const std::string& spec, const std::string& split,
                                                           uint64_t seed, int64_t count, int64_t start) {
  if (split != "eval" && split != "train")
    throw nb::value_error(fmt::format("split '{}': eval or train", split).c_str());
  if (count < 0 || start < 0) throw nb::value_error("problems: count and start must be >= 0");
  const auto task = make_task(spec);
  std::vector<std::tuple<std::string, std::string>> out;
  for (int64_t i = 0; i < count; ++i) {
    const Problem p =
        task->generate(split == "eval" ? Split::Eval : Split::Train, seed, static_cast<uint64_t>(start + i));
    out.emplace_back(p.prompt, p.answer);
  }
  return out;
}

}  // namespace

void bind_stats(nb::module_& m) {
  m.def("_stats_match_sums", &match_sums, nb::arg("sampler"), nb::arg("learner"), nb::arg("tokens"),
        nb::arg("temperature") = 1.0, "Per-sample mismatch sums (mxrl.stats.match_sums).");
  m.def("_stats_bootstrap_mean", &bootstrap_mean_py, nb::arg("tokens"), nb::arg("kl"), nb::arg("reps"),
        nb::arg("seed"), "Bootstrap over prompts of sum(kl)/sum(tokens) (mxrl.stats.bootstrap_mean).");
  m.def("_stats_bootstrap_ratio", &bootstrap_ratio_py, nb::arg("tokens_a"), nb::arg("kl_a"), nb::arg("tokens_b"),
        nb::arg("kl_b"), nb::arg("reps"), nb::arg("seed"), "Paired bootstrap of a KL ratio (mxrl.stats.bootstrap_ratio).");
  m.def("_tasks_problems", &problems, nb::arg("spec"), nb::arg("split") = "eval", nb::arg("seed") = 1,
        nb::arg("count") = 1, nb::arg("start") = 0, "Problems of a task (mxrl.tasks.problems).");
}

}  // namespace mxrl
