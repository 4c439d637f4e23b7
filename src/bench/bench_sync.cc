// mxrl bench sync (under `mpirun -np 2`): bytes and time of a weight sync
// over the MPI transport, beside the point-to-point bandwidth MPI reaches
// between the same two ranks in the same run.
//
// For each model shape, rank 0 builds the ship bundle for an MXFP8 sampler
// (E4M3 codes + E8M0 scales + the high-precision rest) and for a BF16
// sampler (BF16 copies of every linear) from an MXFP8 learner, and sends
// each to rank 1 through the chunked channel (sync/transport.h: chunks with
// XXH3, verified into a staging buffer, the bundle taken whole), which
// answers when it holds the verified bundle. Interleaved with every such
// sync, the same number of bytes goes as one raw message (MPI's own best:
// the baseline). Figures are medians; "x bw" is the sync's rate over the
// raw rate.
#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "bench/bench_util.h"
#include "dist/mpi_channel.h"
#include "model/init.h"
#include "model/model.h"
#include "sync/sync.h"
#include "tokenizer/tokenizer.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
enum : int { kTagRaw = 71, kTagAck = 72 };

void announce(const MpiComm& c, uint8_t kind, uint64_t version) {
  std::vector<std::byte> plan(9);
  plan[0] = std::byte{kind};
  std::memcpy(plan.data() + 1, &version, 8);
  c.bcast(plan, 0);
}

// Rank 0's side of one trial; returns seconds until rank 1's answer. The
// sync goes exactly as the distributed runtime sends it (bcast_chunks).
double send_sync(const MpiComm& c, const std::vector<ChunkFrame>& frames, uint64_t version) {
  announce(c, 1, version);
  const auto t0 = Clock::now();
  uint64_t n = frames.size();
  mpi_check(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, c.get()), "bcast");
  bcast_chunks(c, 0, frames);
  (void)c.recv(1, kTagAck);
  return seconds_since(t0);
}

double send_raw(const MpiComm& c, const std::vector<std::byte>& bytes) {
  announce(c, 0, 0);
  const auto t0 = Clock::now();
  c.send(bytes, 1, kTagRaw);
  (void)c.recv(1, kTagAck);
  return seconds_since(t0);
}

// Rank 1: what rank 0 announces, until a zero-length plan.
void serve(const MpiComm& c) {
  const std::vector<std::byte> ack(1);
  for (;;) {
    const std::vector<std::byte> plan = c.bcast({}, 0);  // [kind u8][version u64]
    if (plan.empty()) return;
    uint64_t version = 0;
    std::memcpy(&version, plan.data() + 1, 8);
    if (plan[0] == std::byte{0}) {
      (void)c.recv(0, kTagRaw);
    } else {
      uint64_t n = 0;
      mpi_check(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, c.get()), "bcast");
      Staging st(version);
      const std::string refused = bcast_chunks(c, 0, n, st);
      if (!refused.empty()) fail("bench sync: {}", refused);
      if (st.take().empty()) fail("bench sync: empty bundle");
    }
    c.send(ack, 0, kTagAck);
  }
}

}  // namespace

void bench_sync(const BenchSyncOptions& a) {
  MpiSession session(nullptr, nullptr);
  if (session.size() != 2) fail("bench sync needs 2 MPI ranks (sender and receiver): mpirun -np 2 mxrl bench sync");
  const MpiComm c(MPI_COMM_WORLD);
  if (c.rank() == 1) return serve(c);
  const nlohmann::json provenance = bench_provenance(PairKernel::Auto);
  ThreadPool pool(a.threads);
  const Exec exec{&pool};
  const int64_t vocab = builtin_char_tokenizer().vocab_size();
  nlohmann::json rows = nlohmann::json::array();
  fmt::print("bench sync: weight sync over MPI beside raw MPI, 2 ranks, {} thread(s)\n{}", pool.size(),
             bench_provenance_text(provenance));
  fmt::print("{:<11} {:<7} {:>12} {:>9} {:>11} {:>11} {:>9} {:>7}\n", "model", "sampler", "bytes", "build ms",
             "sync ms", "raw ms", "sync GB/s", "x bw");
  uint64_t version = 1;
  for (const std::string& shape : a.shapes) {
    ParamTable params(shape_config(shape, vocab));
    fill_params(params, pool);
    const PrecisionPlan learner_plan = PrecisionPlan::resolve("mxfp8");
    const Model learner(params, learner_plan, exec);
    for (const char* sampler : {"mxfp8", "bf16"}) {
      SyncSettings s;
      auto t0 = Clock::now();
      const std::vector<std::byte> bundle =
          build_bundle_bytes(learner, params, PrecisionPlan::resolve(sampler), version, s, exec);
      ChunkSender sender(static_cast<size_t>(a.chunk_bytes));
      const std::vector<ChunkFrame> frames = sender.frames(bundle, version, {});
      const double build = seconds_since(t0);  // the bundle and its chunk headers (with their XXH3)
      std::vector<double> ts, tr;
      for (int r = 0; r <= a.reps; ++r) {  // the first of each: warm-up
        const double x = send_sync(c, frames, version);
        const double y = send_raw(c, bundle);
        if (r > 0) ts.push_back(x), tr.push_back(y);
      }
      const double sync_s = median(ts), raw_s = median(tr), gb = static_cast<double>(bundle.size()) / 1e9;
      fmt::print("{:<11} {:<7} {:>12} {:>9.1f} {:>11.2f} {:>11.2f} {:>9.2f} {:>7.2f}\n", shape, sampler, bundle.size(),
                 build * 1e3, sync_s * 1e3, raw_s * 1e3, gb / sync_s, raw_s / sync_s);
      rows.push_back({{"model", shape},
                      {"sampler", sampler},
                      {"bytes", bundle.size()},
                      {"build_ms", build * 1e3},
                      {"sync_ms", sync_s * 1e3},
                      {"raw_ms", raw_s * 1e3},
                      {"sync_gbps", gb / sync_s},
                      {"raw_gbps", gb / raw_s},
                      {"x_bandwidth", raw_s / sync_s},
                      {"reps", a.reps},
                      {"chunk_bytes", a.chunk_bytes}});
      ++version;
    }
  }
  c.bcast({}, 0);  // done
  if (a.json)
    fmt::print("{}\n", nlohmann::json{{"bench", "sync"}, {"provenance", provenance}, {"rows", rows}}.dump());
}

}  // namespace mxrl
