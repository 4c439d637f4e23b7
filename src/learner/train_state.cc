#include "learner/train_state.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <sstream>

#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_read.h"
#include "util/text.h"

#include <xxhash.h>

namespace mxrl {
namespace fs = std::filesystem;

namespace {

constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "trainer_state.json";

int64_t layout_numel(const ParamTable& t) {
  const auto& e = t.entries();
  return e.empty() ? 0 : e.back().offset + e.back().numel;
}

struct StateFile {
  int64_t step = 0;
  nlohmann::json meta;
  std::vector<std::string> files;
  std::map<std::string, std::vector<int64_t>> shapes;  // param -> shape
  std::map<std::string, std::string> xxh3;             // file -> 16 hex digits
};

// XXH3-64 (seed 0) of a file's bytes, as 16 hex digits; read in pieces.
std::string file_xxh3(const fs::path& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("{}: cannot read: {}", path.string(), std::strerror(errno));
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) XXH3_64bits_update(st, buf.data(), n);
  const bool bad = std::ferror(f);
  const int err = errno;
  std::fclose(f);
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  if (bad) fail("{}: cannot read: {}", path.string(), std::strerror(err));
  return fmt::format("{:016x}", h);
}

// Every file of a state directory but the state file itself, by name.
std::vector<std::string> state_files(const fs::path& dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() != kStateFile) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A further file's name: plain, and not one of the state's own.
bool plain_name(const std::string& n) {
  if (n.empty() || n == "." || n == ".." || n == kStateFile || n == kOptimizerFile) return false;
  if (n == "config.json" || n == "model.safetensors" || n == "tokenizer.json" || n == "tokenizer_config.json")
    return false;
  return n.find('/') == std::string::npos && n.find('\\') == std::string::npos;
}

StateFile parse_state_file(const fs::path& path) {
  const std::string file = path.string();
  const nlohmann::json j = json_parse(read_text_file(path), file);
  if (!j.is_object()) fail("{}: expected a JSON object, got {}", file, j.type_name());
  if (!j.contains("format")) fail("{}: no \"format\" (expected \"{}\")", file, kTrainStateFormat);
  if (!j["format"].is_string() || j["format"].get<std::string>() != kTrainStateFormat)
    fail("{}: format is {}, expected \"{}\"", file, j["format"].dump(), kTrainStateFormat);
  if (!j.contains("version")) fail("{}: no \"version\"", file);
  if (!j["version"].is_number_integer() || j["version"].get<int64_t>() != kTrainStateVersion)
    fail("{}: unsupported version {} (this build reads version {})", file, j["version"].dump(), kTrainStateVersion);
  if (!j.contains("step")) fail("{}: no \"step\"", file);
  const nlohmann::json& step = j["step"];
  if (!step.is_number_integer() ||
      (step.is_number_unsigned() &&
       step.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) ||
      step.get<int64_t>() < 0)
    fail("{}: step must be a non-negative integer, got {}", file, step.dump());
  if (!j.contains("meta")) fail("{}: no \"meta\"", file);
  StateFile sf{step.get<int64_t>(), j["meta"], {}, {}, {}};
  if (j.contains("files")) {  // optional: states without further files have none
    if (!j["files"].is_array()) fail("{}: \"files\" must be an array of file names", file);
    for (const nlohmann::json& n : j["files"]) {
      if (!n.is_string() || !plain_name(n.get<std::string>()))
        fail("{}: \"files\" entry {} is not a plain file name of the state", file, n.dump());
      sf.files.push_back(n.get<std::string>());
    }
  }
  if (!j.contains("shapes") || !j["shapes"].is_object())
    fail("{}: no \"shapes\" object (the model's parameter shapes)", file);
  for (const auto& [name, shape] : j["shapes"].items()) {
    std::vector<int64_t>& v = sf.shapes[name];
    if (!shape.is_array()) fail("{}: \"shapes\" entry \"{}\" is not an array of sizes", file, name);
    for (const nlohmann::json& d : shape) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        fail("{}: \"shapes\" entry \"{}\" is not an array of sizes", file, name);
      v.push_back(d.get<int64_t>());
    }
  }
  if (!j.contains("xxh3") || !j["xxh3"].is_object()) fail("{}: no \"xxh3\" object (the files' digests)", file);
  for (const auto& [name, h] : j["xxh3"].items()) {
    if (name.empty() || name == "." || name == ".." || name == kStateFile || name.find('/') != std::string::npos ||
        name.find('\\') != std::string::npos)
      fail("{}: \"xxh3\" names \"{}\", not a file of the state", file, name);
    if (!h.is_string() || h.get<std::string>().size() != 16 ||
        h.get<std::string>().find_first_not_of("0123456789abcdef") != std::string::npos)
      fail("{}: \"xxh3\" of {} must be 16 lowercase hex digits, got {}", file, name, h.dump());
    sf.xxh3[name] = h.get<std::string>();
  }
  return sf;
}

}  // namespace

void save_train_state(const std::string& dir, const TrainState& s) {
  if (s.config.to_json() != s.params.config().to_json())
    fail("{}: the parameter table was built for another model config", dir);
  const int64_t n = layout_numel(s.params);
  if (s.params.numel() != n) fail("{}: the parameter table has no storage", dir);
  if (static_cast<int64_t>(s.m.size()) != n)
    fail("{}: the first moment m has {} elements, the parameters {}", dir, s.m.size(), n);
  if (static_cast<int64_t>(s.v.size()) != n)
    fail("{}: the second moment v has {} elements, the parameters {}", dir, s.v.size(), n);
  if (s.step < 0) fail("{}: step must be >= 0, got {}", dir, s.step);
  std::vector<std::string> file_names;
  for (const auto& [name, bytes] : s.files) {
    if (!plain_name(name)) fail("{}: \"{}\" cannot be a further file of a train state", dir, name);
    file_names.push_back(name);
  }
  nlohmann::json shapes = nlohmann::json::object();
  for (const ParamInfo& p : s.params.entries()) shapes[p.name] = p.shape;
  nlohmann::json state = {{"format", kTrainStateFormat},
                          {"version", kTrainStateVersion},
                          {"step", s.step},
                          {"meta", s.meta},
                          {"files", file_names},
                          {"shapes", shapes}};
  try {
    (void)state.dump();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: cannot serialize meta for {}: {}", dir, kStateFile, e.what());
  }

  write_dir_atomic(dir, [&](const std::string& tmp) {
    for (const auto& [name, bytes] : s.files) write_file_atomic((fs::path(tmp) / name).string(), bytes);
    write_checkpoint_files(tmp, s.config, s.params, DType::F32, {}, s.tokenizer_json, s.tokenizer_config_json);
    SafetensorsWriter w;
    for (const char* which : {"m", "v"}) {
      const std::vector<float>& x = which[0] == 'm' ? s.m : s.v;
      for (const ParamInfo& p : s.params.entries())
        w.add_view(std::string(which) + "." + p.name, DType::F32, p.shape,
                   std::as_bytes(std::span<const float>(x.data() + p.offset, p.numel)));
    }
    w.set_metadata({{"format", "pt"}});
    w.write((fs::path(tmp) / kOptimizerFile).string());
    // The digests of the files as they lie on disk, read back.
    nlohmann::json digests = nlohmann::json::object();
    for (const std::string& name : state_files(tmp)) digests[name] = file_xxh3(fs::path(tmp) / name);
    nlohmann::json full = state;
    full["xxh3"] = std::move(digests);
    write_file_atomic((fs::path(tmp) / kStateFile).string(), full.dump(2) + "\n");
  });
}

TrainState load_train_state(const std::string& dir_s) {
  const fs::path dir(dir_s);
  if (!fs::is_directory(dir)) fail("{}: not a train state directory", dir_s);
  const fs::path state_path = dir / kStateFile, opt_path = dir / kOptimizerFile;
  if (!fs::exists(state_path)) fail("{}: missing (not a train state directory)", state_path.string());
  if (!fs::exists(opt_path)) fail("{}: missing (not a train state directory)", opt_path.string());
  StateFile sf = parse_state_file(state_path);
  // Every file as it was saved, before anything reads it; every file a record.
  for (const auto& [name, want] : sf.xxh3) {
    const fs::path p = dir / name;
    if (!fs::exists(p)) fail("{}: missing (its XXH3 is recorded in {})", p.string(), kStateFile);
    const std::string got = file_xxh3(p);
    if (got != want)
      fail("{}: XXH3 is {}, {} recorded {}: the file changed after it was saved (corrupted?)", p.string(), got,
           kStateFile, want);
  }
  for (const std::string& name : state_files(dir))
    if (!sf.xxh3.count(name)) fail("{}: not covered by the XXH3 digests in {}", (dir / name).string(), kStateFile);

  Checkpoint ck = load_checkpoint(dir_s);
  if (ck.dtype != DType::F32)
    fail("{}: the weights are {}; a train state holds F32 master weights", dir_s, dtype_name(ck.dtype));
  TrainState s{std::move(ck.config),
               std::move(ck.params),
               {},
               {},
               sf.step,
               std::move(sf.meta),
               std::move(ck.tokenizer_json),
               std::move(ck.tokenizer_config_json)};
  // The model is the one the state recorded, parameter for parameter.
  for (const ParamInfo& p : s.params.entries()) {
    const auto it = sf.shapes.find(p.name);
    if (it == sf.shapes.end())
      fail("{}: the model has parameter '{}' {}, which the state did not record", state_path.string(), p.name,
           shape_str(p.shape));
    if (it->second != p.shape)
      fail("{}: the model's parameter '{}' has shape {}, the state recorded {}", state_path.string(), p.name,
           shape_str(p.shape), shape_str(it->second));
  }
  if (sf.shapes.size() != s.params.entries().size())
    for (const auto& [name, shape] : sf.shapes)
      if (s.params.index_of(name) < 0)
        fail("{}: the state recorded parameter '{}' {}, which the model lacks", state_path.string(), name,
             shape_str(shape));

  const std::string opt_file = opt_path.string();
  const SafetensorsFile f = SafetensorsFile::open(opt_file);
  const auto& entries = s.params.entries();
  const int64_t n = s.params.numel();
  s.m.assign(n, 0.0f);
  s.v.assign(n, 0.0f);
  std::vector<char> seen_m(entries.size(), 0), seen_v(entries.size(), 0);
  for (const auto& t : f.tensors()) {
    const bool is_m = t.name.rfind("m.", 0) == 0, is_v = t.name.rfind("v.", 0) == 0;
    const int i = is_m || is_v ? s.params.index_of(std::string_view(t.name).substr(2)) : -1;
    if (i < 0) fail("{}: unexpected tensor '{}' (expected m.<param> or v.<param>)", opt_file, t.name);
    const ParamInfo& p = entries[i];
    if (t.dtype != DType::F32)
      fail("{}: tensor '{}' has dtype {}, expected F32", opt_file, t.name, dtype_name(t.dtype));
    if (t.shape != p.shape)
      fail("{}: tensor '{}' has shape {}, the parameter has {}", opt_file, t.name, shape_str(t.shape),
           shape_str(p.shape));
    char& seen = is_m ? seen_m[i] : seen_v[i];
    if (seen) fail("{}: tensor '{}' appears twice", opt_file, t.name);
    seen = 1;
    float* x = (is_m ? s.m : s.v).data() + p.offset;
    std::memcpy(x, t.data.data(), p.numel * sizeof(float));
    for (int64_t k = 0; k < p.numel; ++k)
      if (!std::isfinite(x[k]))
        fail("{}: tensor '{}' holds {} at element {}; the optimizer state must be finite", opt_file, t.name,
             std::isnan(x[k]) ? "NaN" : (x[k] > 0 ? "+inf" : "-inf"), k);
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!seen_m[i]) fail("{}: missing tensor 'm.{}'", opt_file, entries[i].name);
    if (!seen_v[i]) fail("{}: missing tensor 'v.{}'", opt_file, entries[i].name);
  }
  for (const std::string& name : sf.files) {
    const fs::path p = dir / name;
    if (!fs::exists(p)) fail("{}: missing (listed in {})", p.string(), kStateFile);
    s.files[name] = read_text_file(p);
  }
  return s;
}

}  // namespace mxrl
