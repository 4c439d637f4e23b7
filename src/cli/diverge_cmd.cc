// mxrl diverge: where an engine's forward pass first differs from the
// learner's. The comparison lives in the Python package (mxrl.diverge) and the
// engines in their adapters (mxrl_vllm.diverge: vLLM with its own kernels or
// mxrl's); this command runs it with the Python that has them — the source
// tree's build-py/venv, where scripts/vllm.sh installs vLLM and the adapter —
// passing its arguments through. `python -m mxrl diverge` is the same
// comparison where only mxrl's own sampler is to be compared.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "util/error.h"

#ifndef MXRL_ENGINE_PYTHON
#define MXRL_ENGINE_PYTHON "build-py/venv/bin/python"
#endif

namespace mxrl {

void add_diverge_command(CLI::App& app) {
  struct Args {
    std::string python = MXRL_ENGINE_PYTHON;
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
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) self[n] = 0, setenv("MXRL_BIN", self, 0);
    std::vector<char*> args;
    for (std::string& x : argv) args.push_back(x.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    fail("diverge: cannot run {}: {}", a->python, std::strerror(errno));
  });
}

}  // namespace mxrl
