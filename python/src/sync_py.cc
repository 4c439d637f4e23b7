// mxrl.sync: weight-sync bundles (export, inspect) and the manifest checks
// (conditions 1-4 of docs/reference.md §6), on the library code `mxrl sync` and
// `mxrl verify-sync` run. Manifests cross the boundary as lists of dicts
// (digests_to_json); python/mxrl/sync.py is the documented front.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>

#include "arrays.h"
#include "interop/engine_dump.h"
#include "learner/learner.h"
#include "model/checkpoint.h"
#include "py_model.h"
#include "sync/bundle.h"
#include "sync/checks.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {

PrecisionPlan recipe_plan(const std::string& recipe, bool floor) {
  Recipe r;
  r.plan = recipe;
  r.floor = floor;
  return r.precision_plan();
}

void sync_export(const std::string& model_dir, const std::string& out, const std::string& recipe,
                 const std::string& sync, std::optional<std::string> sampler_plan, uint64_t version, bool floor,
                 int threads) {
  const SyncMode mode = parse_sync_mode(sync);
  const PrecisionPlan learner_plan = recipe_plan(recipe, floor);
  if (mode == SyncMode::Requantize && sampler_plan)
    throw nb::value_error("sampler_plan applies only with sync='ship' (a requantize bundle is for any sampler plan)");
  const PrecisionPlan splan = sampler_plan ? PrecisionPlan::resolve(*sampler_plan) : learner_plan;
  nb::gil_scoped_release unlocked;
  const Checkpoint ck = load_checkpoint(model_dir);
  ThreadPool pool(threads);
  write_bundle(export_bundle(ck.params, learner_plan, mode, splan, version, {&pool}), out);
}

nb::object sync_inspect_file(const std::string& path) {
  nlohmann::json j;
  {
    nb::gil_scoped_release unlocked;
    j = bundle_summary(read_bundle(path));
  }
  return json_to_py(j);
}

nb::object sync_inspect_bytes(nb::bytes data, const std::string& label) {
  const std::span<const std::byte> bytes(static_cast<const std::byte*>(data.data()), data.size());
  return json_to_py(bundle_summary(parse_bundle(bytes, label)));
}

// {condition: {"passed": bool, "findings": [str]}} in condition order.
nb::object results_to_py(const std::vector<CheckResult>& rs) {
  nb::dict out;
  for (const CheckResult& r : rs) {
    nb::dict c;
    c["passed"] = r.passed;
    nb::list f;
    for (const std::string& s : r.findings) f.append(nb::str(s.c_str(), s.size()));
    c["findings"] = f;
    out[r.name.c_str()] = c;
  }
  return out;
}

nb::object sync_check_manifests(nb::handle expected, nb::handle got, nb::handle previous) {
  const auto e = digests_from_json(py_to_json(expected, "expected"));
  const auto g = digests_from_json(py_to_json(got, "got"));
  std::vector<TensorDigest> before;  // what the sampler held before the sync, if given
  if (!previous.is_none()) before = digests_from_json(py_to_json(previous, "previous"));
  return results_to_py(check_manifests(e, g, before));
}

nb::object sync_verify_dump(const std::string& learner_dir, const std::string& dump, const std::string& recipe,
                            bool floor, const std::string& naming, std::optional<std::string> previous, int threads) {
  const PrecisionPlan plan = recipe_plan(recipe, floor);
  const Naming n = parse_naming(naming);
  std::vector<CheckResult> rs;
  {
    nb::gil_scoped_release unlocked;
    const Checkpoint ck = load_checkpoint(learner_dir);
    ThreadPool pool(threads);
    std::vector<TensorDigest> before;  // what the engine held before the sync, if its dump is given
    if (previous) before = read_dump_manifest(*previous, ck.config, plan, n);
    rs = verify_dump_since(ck.params, plan, dump, n, before, {&pool});
  }
  return results_to_py(rs);
}

void sync_write_dump(const PyModel& m, const std::string& path, const std::string& naming) {
  const Naming n = parse_naming(naming);
  nb::gil_scoped_release unlocked;
  write_dump(*m.model, n, path);
}

nb::object sync_dump_manifest(const std::string& dump, const PyModel& m, const std::string& naming) {
  return json_to_py(
      digests_to_json(read_dump_manifest(dump, m.model->config(), m.model->plan(), parse_naming(naming))));
}

}  // namespace

void bind_sync(nb::module_& m) {
  m.def("_sync_export", &sync_export, nb::arg("model_dir"), nb::arg("out"), nb::arg("recipe"), nb::arg("sync"),
        nb::arg("sampler_plan").none(), nb::arg("version"), nb::arg("floor"), nb::arg("threads"),
        "Write the weight-sync bundle of a checkpoint (mxrl.sync.export).");
  m.def("_sync_inspect_file", &sync_inspect_file, nb::arg("path"),
        "Parse and verify a bundle file (mxrl.sync.inspect).");
  m.def("_sync_inspect_bytes", &sync_inspect_bytes, nb::arg("data"), nb::arg("label"),
        "Parse and verify bundle bytes (mxrl.sync.inspect).");
  m.def("_sync_check_manifests", &sync_check_manifests, nb::arg("expected"), nb::arg("got"),
        nb::arg("previous").none() = nb::none(),
        "Conditions 1-4 of two manifests, given what was held before the sync if ``previous`` (mxrl.sync.verify).");
  m.def("_sync_check_names", &check_names, "The seven live checks, in condition order (mxrl.sync.check_names).");
  m.def("_sync_verify_dump", &sync_verify_dump, nb::arg("learner_dir"), nb::arg("dump"), nb::arg("recipe"),
        nb::arg("floor"), nb::arg("naming"), nb::arg("previous").none(), nb::arg("threads"),
        "Conditions 1-4 of an engine's weight dump against a learner checkpoint (mxrl.sync.verify_dump).");
  m.def("_sync_write_dump", &sync_write_dump, nb::arg("model"), nb::arg("path"), nb::arg("naming"),
        "Write what a Model computes with as an engine weight dump (mxrl.sync.write_dump).");
  m.def("_sync_dump_manifest", &sync_dump_manifest, nb::arg("dump"), nb::arg("model"), nb::arg("naming"),
        "The manifest an engine weight dump holds, under mxrl names (mxrl.sync.dump_manifest).");
}

}  // namespace mxrl
