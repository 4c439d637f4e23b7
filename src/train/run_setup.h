// Run set-up, shared by the front ends (`mxrl sft`, `mxrl rl`): where a run
// starts (a model checkpoint, or a training state it resumes), its task
// (--data: a JSONL dataset instead of a built-in task), and its output
// folder, opened as util/run_dir.h says: locked for the run, leftovers of a
// killed save removed, another run's checkpoints refused unless overwritten.
// The distributed lifecycle of RL (mpirun) is dist/distributed.h run_rl_job.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "train/grpo.h"
#include "train/sft.h"
#include "util/exec.h"
#include "util/run_dir.h"

namespace mxrl {

struct RunSpec {
  std::string model;        // checkpoint directory a new run starts from
  std::string resume;       // training-state directory to continue (its settings are kept)
  std::string data;         // JSONL dataset: the task becomes jsonl:PATH
  bool task_given = false;  // a task was named too (refused with data)
  std::string out;          // output folder ("" : none, nothing is locked)
  bool overwrite = false;   // a new run may replace another run's checkpoints in out
  // One line each about what opening the output folder did (removed leftovers).
  std::function<void(const std::string&)> on_note;
};

// The task spec a new run trains on: jsonl:DATA with data, else `task`.
// Throws "give --task or --data, not both" when both were given.
std::string task_of(const RunSpec& spec, const std::string& task);

// Checks a spec before anything is loaded: a new run needs a model.
void check_spec(const RunSpec& spec);

// Opens spec.out (when given) for a run: see util/run_dir.h.
RunDir open_run_dir(const RunSpec& spec);

// A run and the output folder it holds (the lock is released with it).
struct SftSession {
  RunDir dir;
  SftRun run;
};
struct RlSession {
  RunDir dir;
  RlRun run;
};

// Starts a new run from spec.model with cfg (its task from task_of) or
// resumes spec.resume (cfg is not used), then opens the output folder (before
// the run writes anything there; bad settings are refused as such first).
SftSession open_sft(const RunSpec& spec, SftConfig cfg, const Exec& exec = {});
// As open_sft; with `remote`, the run's rollout and training go there
// (dist/distributed.h).
RlSession open_rl(const RunSpec& spec, RlConfig cfg, const Exec& exec = {}, std::shared_ptr<RlRemote> remote = nullptr);

}  // namespace mxrl
