// Requests and samples as bytes (util/bytes.h): what the learner and sampler
// processes of the MPI runtime send each other, and what a training state
// keeps of a rollout generated ahead (off-policy). Every field travels, the
// floats bit for bit.
#pragma once
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "sampler/engine.h"
#include "util/bytes.h"

namespace mxrl {

void write_requests(ByteWriter& w, const std::vector<GenerationRequest>& reqs);
std::vector<GenerationRequest> read_requests(ByteReader& r);
void write_samples(ByteWriter& w, const std::vector<GeneratedSample>& samples);
std::vector<GeneratedSample> read_samples(ByteReader& r);

}  // namespace mxrl
