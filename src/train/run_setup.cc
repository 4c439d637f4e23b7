#include "train/run_setup.h"

#include "util/error.h"

namespace mxrl {

std::string task_of(const RunSpec& spec, const std::string& task) {
  if (spec.data.empty()) return task;
  if (spec.task_given) fail("give --task or --data, not both");
  return "jsonl:" + spec.data;
}

void check_spec(const RunSpec& spec) {
  if (spec.resume.empty() && spec.model.empty()) fail("give --model DIR (or --resume STATE_DIR)");
}

RunDir open_run_dir(const RunSpec& spec) {
  if (spec.out.empty()) return {};
  RunDir d = RunDir::open(spec.out, {.overwrite = spec.overwrite, .resume_from = spec.resume, .command = {}});
  if (spec.on_note)
    for (const std::string& n : d.notes()) spec.on_note(n);
  return d;
}

// The run is made first (so that bad settings, models and states are refused
// as such), the folder opened before it writes anything.
SftSession open_sft(const RunSpec& spec, SftConfig cfg, const Exec& exec) {
  check_spec(spec);
  if (spec.resume.empty()) cfg.task = task_of(spec, cfg.task);
  SftRun run = spec.resume.empty() ? SftRun::start(spec.model, cfg, exec) : SftRun::resume(spec.resume, exec);
  RunDir dir = open_run_dir(spec);
  return {std::move(dir), std::move(run)};
}

RlSession open_rl(const RunSpec& spec, RlConfig cfg, const Exec& exec, std::shared_ptr<RlRemote> remote) {
  check_spec(spec);
  if (spec.resume.empty()) cfg.task = task_of(spec, cfg.task);
  RlRun run = remote ? (spec.resume.empty() ? RlRun::start_remote(spec.model, cfg, std::move(remote), exec)
                                            : RlRun::resume_remote(spec.resume, std::move(remote), exec))
                     : (spec.resume.empty() ? RlRun::start(spec.model, cfg, exec) : RlRun::resume(spec.resume, exec));
  RunDir dir = open_run_dir(spec);
  return {std::move(dir), std::move(run)};
}

}  // namespace mxrl
