// The distributed runtime: GRPO with the learner and the sampler as separate
// processes, over MPI (`mpirun -np N mxrl rl ... --learners L --samplers S`,
// N = L + S).
//
//   world rank 0            learner rank 0, the coordinator: runs the RL loop
//                           (train/grpo.h) with an RlRemote from here
//   world ranks 1 .. L-1    data-parallel learners
//   world ranks L .. N-1    samplers, each with its own engine
//
// A step: rank 0 sends the step's requests to every sampler (sampler i of S
// takes prompts [i*P/S, (i+1)*P/S)), gathers their samples (with log-probs,
// logits rows and versions), scores and weights them, and for each optimizer
// update sends the mini-batch to the learners; each computes the gradient
// subtrees it owns (learner/learner.h GradTree), rank 0 sums the roots in the
// fixed order and broadcasts the gradient, and every learner applies AdamW
// (so the masters stay identical; checked at the end by digest). The new
// version's bundle then goes to every sampler in chunks (sync/transport.h)
// through a staging buffer, followed by what the checks need (the expected
// manifest; the probe's reference logits when agreement is due); each
// sampler applies it and runs the seven checks against its own engine, and
// rank 0 gathers the reports (the metrics keep each rank's).
//
// Off-policy 1: step t+1's requests go out before the learners train step t;
// the samplers generate under version t meanwhile, and rank 0 gathers those
// samples just before the sync of version t+1 (a sampler finishes a rollout
// before it takes a sync).
//
// Stopping: rank 0 ends the job with a Stop to every rank (after draining a
// rollout in flight), also when a check fails under --checks stop, and then
// reports the error. An error on another rank is printed with its rank and
// aborts the job (MPI_Abort).
#pragma once
#include <functional>
#include <memory>

#include "dist/mpi_channel.h"
#include "train/grpo.h"
#include "train/run_setup.h"
#include "util/exec.h"

namespace mxrl {

class Cluster {
 public:
  // Checks the world's size against L + S (one line naming both otherwise).
  Cluster(int learners, int samplers);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  bool coordinator() const { return world_rank_ == 0; }
  int world_rank() const { return world_rank_; }
  const char* role() const;  // "learner" or "sampler"

  // Rank 0: the remote half of the run, for RlRun::start_remote / resume_remote.
  std::shared_ptr<RlRemote> remote(const Exec& exec);
  // Rank 0: stops every other rank (draining a rollout in flight) and, with
  // `compare_weights` (the run is still alive), compares the learners'
  // weights with its own (throws if they differ). In the middle of an
  // exchange (an error there) it aborts the job instead.
  void stop(bool compare_weights = true);
  // Other ranks: serve rank 0 until it stops the job.
  void serve(const Exec& exec);

  struct State;

 private:
  int learners_, world_rank_ = 0;
  std::unique_ptr<State> st_;
};

// A whole RL job, as `mxrl rl` runs it. learners == 0 and samplers == 0:
// one process (open_rl, then body). Otherwise (under mpirun; both must be at
// least 1): MPI starts, rank 0 opens the output folder and the run with the
// cluster as its remote half, runs body and then stops every other rank
// (comparing the learners' weights with its own); the other ranks serve
// until stopped. An error on rank 0 stops the others cleanly (or aborts the
// job mid-exchange) and propagates.
void run_rl_job(const RunSpec& spec, const RlConfig& cfg, int learners, int samplers, const Exec& exec,
                const std::function<void(RlRun&)>& body);

}  // namespace mxrl
