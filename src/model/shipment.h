// What a model computes with, as it moves between a learner and a sampler:
// prepared linears as held and the compute copies, by checkpoint name.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/linear.h"

namespace mxrl {

// A compute copy (embedding or norm weight) by its checkpoint name.
struct NamedBuffer {
  std::string name;
  const float* data = nullptr;  // FP32 values (BF16-rounded when the plan uses BF16 copies)
  int64_t numel = 0;
  std::vector<int64_t> shape;
};

// What a model computes with, in shippable form: every linear's forward
// weights as held (MX codes + E8M0 scales, FP8 codes + scales, BF16 bits or
// FP32; unpacked), and every compute copy (embeddings, norms) as the FP32
// values used. Keys are checkpoint tensor names; a tied lm_head is the linear
// named model.embed_tokens.weight (the embedding's compute copy sits beside it).
struct WeightShipment {
  std::map<std::string, PreparedLinear> linears;
  std::map<std::string, std::vector<float>> copies;
};

}  // namespace mxrl
