// The Python-side Model: a prepared model, its thread pool and tokenizer.
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/thread_pool.h"

namespace mxrl {
struct PyModel {
  std::string dir;
  std::shared_ptr<ThreadPool> pool;
  std::shared_ptr<const Model> model;
  std::optional<Tokenizer> tokenizer;
  static PyModel load(const std::filesystem::path& dir, const std::string& plan, int threads);
};
}  // namespace mxrl
