// Each mxrl subcommand registers itself on the root CLI11 app.
#pragma once
#include <CLI/CLI.hpp>

#include "cli/settings_cli.h"
#include "kernels/gemm/gemm.h"  // pair_kernel_from_name, for --kernels

namespace mxrl {

void add_quantize_commands(CLI::App& app);    // quantize, dequantize
void add_bench_commands(CLI::App& app);       // bench quantize, gemm, forward, decode, train, sync (bench/bench.h)
void add_demo_command(CLI::App& app);         // demo: the main job (init -> SFT -> samples)
void add_score_command(CLI::App& app);        // score
void add_init_command(CLI::App& app);         // init
void add_tokenize_command(CLI::App& app);     // tokenize
void add_generate_command(CLI::App& app);     // generate
void add_sft_command(CLI::App& app);          // sft
void add_rl_command(CLI::App& app);           // rl: GRPO with checked weight syncs
void add_sync_command(CLI::App& app);         // sync export, sync inspect
void add_faults_command(CLI::App& app);       // faults: the sync fault matrix
void add_report_commands(CLI::App& app);      // report, experiment: the paper's claims measured here
void add_verify_sync_command(CLI::App& app);  // verify-sync: conditions 1-4 on another engine's weight dump
void add_export_command(CLI::App& app);       // export: compressed-tensors MXFP8 for vLLM
void add_diverge_command(CLI::App& app);      // diverge: runs mxrl_vllm's first-divergence finder

// --threads N (0 = all cores), shared by commands that compute.
inline CLI::Option* add_threads_option(CLI::App* cmd, int* threads) {
  return cmd->add_option("--threads", *threads, "Worker threads (0: all cores)")->check(non_negative())->default_val(0);
}

// --kernels {auto,fma,dot,amx}: how GEMMs with BF16 and MX weights run, the
// Exec::pair_kernel of the command's work (pair_kernel_from_name in
// kernels/gemm/gemm.h: an error where the machine lacks the one asked for). amx is
// batch-invariant but not the reference's pair chain: only when asked for.
inline CLI::Option* add_kernels_option(CLI::App* cmd, std::string* kernels) {
  return cmd
      ->add_option("--kernels", *kernels,
                   "GEMM pair kernel for BF16/MX weights: auto (per shape class, dot or fma, whichever a start-up "
                   "micro-benchmark finds faster; MXRL_PAIR_KERNEL=dot|fma forces it), fma, dot (VDPBF16PS), amx "
                   "(AMX tiles: batch-invariant, not the reference chain)")
      ->check(CLI::IsMember({"auto", "fma", "dot", "amx"}))
      ->default_val("auto");
}

}  // namespace mxrl
