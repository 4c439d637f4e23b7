// mxrl: end-to-end MXFP8 reinforcement learning of language models.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "util/error.h"
#include "util/memory.h"
#include "util/version.h"

static bool has_command(CLI::App& app, const char* name) {
  for (const CLI::App* c : app.get_subcommands({}))
    if (c->get_name() == name) return true;
  return false;
}

int main(int argc, char** argv) {
  mxrl::keep_freed_memory();  // util/memory.h: why
  CLI::App app{"mxrl: MXFP8 training and rollout that agree to the bit", "mxrl"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "mxrl " MXRL_VERSION);
  mxrl::add_quantize_commands(app);
  mxrl::add_bench_commands(app);
  mxrl::add_demo_command(app);
  mxrl::add_score_command(app);
  mxrl::add_init_command(app);
  mxrl::add_tokenize_command(app);
  mxrl::add_generate_command(app);
  mxrl::add_sft_command(app);
  mxrl::add_rl_command(app);
  mxrl::add_sync_command(app);
  mxrl::add_faults_command(app);
  mxrl::add_report_commands(app);
  mxrl::add_verify_sync_command(app);
  mxrl::add_export_command(app);
  mxrl::add_diverge_command(app);
  if (argc > 1 && argv[1][0] != '-' && !has_command(app, argv[1])) {
    std::fprintf(stderr, "mxrl: error: unknown command '%s' (see --help)\n", argv[1]);
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "mxrl: error: %s (see --help)\n", e.what());
    return 2;
  } catch (const mxrl::Error& e) {
    std::fprintf(stderr, "mxrl: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mxrl: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
