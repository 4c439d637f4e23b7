// mxrl diverge: where an engine's forward pass first differs from the
// learner's. The comparison lives in the Python package (mxrl.diverge) and the
// engines in their adapters (mxrl_vllm.diverge: vLLM with its own kernels or
// mxrl's); this command runs it with the Python that has them — the source
// tree's build-py/venv, where scripts/vllm.sh installs vLLM and the adapter —
// passing its arguments through. `python -m mxrl diverge` is the same
// comparison where only mxrl's own sampler is to be compared.
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "experiments/report.h"
#include "util/error.h"
#include "util/process.h"

namespace mxrl {

void add_diverge_command(CLI::App& app) {
  struct Args {
    std::string python = default_engine_python();
  };
  auto a = std::make_shared<Args>();
  auto* c = app.add_subcommand(
      "diverge",
      "Where an engine (mxrl's sampler, vLLM with its kernels or mxrl's) first differs from the learner: per layer "
      "and op, max abs / rel L2 / ULPs; a table, JSON and a plot. Runs `PYTHON -m mxrl_vllm diverge ARGS`: "
      "CHECKPOINT --plan P --engine NAME... --out DIR (see `mxrl diverge -- --help`)");
  c->add_option("--python", a->python, "A Python with mxrl, mxrl-vllm and vLLM (scripts/vllm.sh makes it)")
      ->capture_default_str();
  c->allow_extras();
  c->prefix_command();
  c->callback([a, c] {
    std::vector<std::string> argv = {a->python, "-m", "mxrl_vllm", "diverge"};
    for (const std::string& x : c->remaining()) argv.push_back(x);
    if (!std::filesystem::exists(a->python))
      fail("diverge: {} is missing (run scripts/vllm.sh, or pass --python; `python -m mxrl diverge` compares "
           "mxrl's own sampler without vLLM)",
           a->python);
    exec_program(argv);
  });
}

}  // namespace mxrl
