#include "model/digest.h"

#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "model/precision.h"
#include "numerics/formats.h"
#include "numerics/fp8_grid.h"
#include "util/error.h"
#include "util/json_read.h"
#include "util/text.h"

namespace mxrl {

namespace {

template <typename T>
TensorDigest make(const std::string& name, const char* part, const char* dtype, std::vector<int64_t> shape,
                  std::string precision, const std::vector<T>& v) {
  TensorDigest d;
  d.name = name;
  d.part = part;
  d.dtype = dtype;
  d.shape = std::move(shape);
  d.precision = std::move(precision);
  d.bytes = static_cast<int64_t>(v.size() * sizeof(T));
  d.xxh3 = digest_bytes(v.data(), v.size() * sizeof(T));
  return d;
}

std::string hex(uint64_t h) { return fmt::format("{:016x}", h); }

std::string describe_parts(const std::vector<const TensorDigest*>& parts) {
  std::vector<std::string> p;
  for (const TensorDigest* d : parts) p.push_back(fmt::format("{}({} {})", d->part, d->dtype, shape_str(d->shape)));
  return fmt::format("{} [{}]", fmt::join(p, ", "), parts.empty() ? "" : parts.front()->precision);
}

// Entries grouped by name, names in first-appearance order.
struct Grouped {
  std::vector<std::string> order;
  std::unordered_map<std::string, std::vector<const TensorDigest*>> by_name;
  explicit Grouped(const std::vector<TensorDigest>& d) {
    for (const TensorDigest& t : d) {
      auto [it, fresh] = by_name.try_emplace(t.name);
      if (fresh) order.push_back(t.name);
      it->second.push_back(&t);
    }
  }
};

std::vector<std::string> part_list(const std::vector<const TensorDigest*>& parts) {
  std::vector<std::string> out;
  for (const TensorDigest* d : parts)
    if (std::find(out.begin(), out.end(), d->part) == out.end()) out.push_back(d->part);
  return out;
}

void find_duplicates(const Grouped& g, const char* side, std::vector<std::string>& out) {
  for (const std::string& name : g.order) {
    std::map<std::string, int> count;
    for (const TensorDigest* d : g.by_name.at(name)) count[d->part]++;
    for (const auto& [part, n] : count)
      if (n > 1) out.push_back(fmt::format("duplicate {} [{}]: {} times in {}", name, part, n, side));
  }
}

}  // namespace

uint64_t digest_bytes(const void* data, size_t bytes) { return XXH3_64bits(data, bytes); }

std::vector<TensorDigest> linear_digests(const PreparedLinear& L, const std::string& name) {
  const std::string prec = L.prec.str();
  std::vector<TensorDigest> out;
  for (const HeldPart& p : precision_traits(L.prec.precision).held_parts(L)) {
    TensorDigest d;
    d.name = name;
    d.part = p.part;
    d.dtype = dtype_name(p.dtype);
    d.shape = p.shape;
    d.precision = prec;
    d.bytes = p.bytes;
    d.xxh3 = digest_bytes(p.data, static_cast<size_t>(p.bytes));
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<TensorDigest> model_digests(const Model& model) {
  const auto& names = model.param_names();
  std::unordered_map<std::string, size_t> rank;
  for (size_t i = 0; i < names.size(); ++i) rank.emplace(names[i], i);
  auto rank_of = [&](const std::string& n) {
    auto it = rank.find(n);
    if (it == rank.end()) fail("model_digests: '{}' is not in the parameter table", n);
    return it->second;
  };
  const bool tied = model.config().tie_word_embeddings;
  std::vector<std::pair<size_t, std::vector<TensorDigest>>> items;
  const bool bf16 = model.plan().bf16_embeddings;
  model.for_each_tensor([&](const ModelTensor& t) {
    if (const PreparedLinear* L = t.linear) {
      if (tied && L == &model.lm_head())
        items.emplace_back(names.size(), linear_digests(*L, kTiedLmHeadName));  // after model.norm.weight
      else
        items.emplace_back(rank_of(L->name), linear_digests(*L, L->name));
      return;
    }
    const NamedBuffer& c = *t.copy;
    std::vector<TensorDigest> one;
    if (bf16) {
      // The copy holds BF16-rounded FP32 values: hash their (exact) BF16 bits.
      std::vector<uint16_t> b(c.numel);
      for (int64_t i = 0; i < c.numel; ++i) b[i] = f32_to_bf16(c.data[i]);
      one.push_back(make(c.name, "bf16", dtype_name(DType::BF16), c.shape, "bf16", b));
    } else {
      TensorDigest d;
      d.name = c.name, d.part = "f32", d.dtype = dtype_name(DType::F32), d.shape = c.shape, d.precision = "fp32";
      d.bytes = c.numel * static_cast<int64_t>(sizeof(float));
      d.xxh3 = digest_bytes(c.data, d.bytes);
      one.push_back(std::move(d));
    }
    items.emplace_back(rank_of(c.name), std::move(one));
  });
  std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<TensorDigest> out;
  for (auto& [r, ds] : items)
    for (TensorDigest& d : ds) out.push_back(std::move(d));
  return out;
}

std::vector<std::string> compare_digests(const std::vector<TensorDigest>& expected,
                                         const std::vector<TensorDigest>& got) {
  std::vector<std::string> out;
  const Grouped e(expected), g(got);
  find_duplicates(e, "expected", out);
  find_duplicates(g, "got", out);
  for (const std::string& n : e.order)
    if (!g.by_name.count(n)) out.push_back(fmt::format("missing {} ({})", n, describe_parts(e.by_name.at(n))));
  for (const std::string& n : g.order)
    if (!e.by_name.count(n)) out.push_back(fmt::format("extra {} ({})", n, describe_parts(g.by_name.at(n))));
  // Whose bytes a mismatching part holds (a placement swap).
  std::multimap<std::tuple<std::string, uint64_t, int64_t>, std::string> owner;
  for (const TensorDigest& d : expected) owner.emplace(std::make_tuple(d.part, d.xxh3, d.bytes), d.name);
  for (const std::string& n : e.order) {
    auto git = g.by_name.find(n);
    if (git == g.by_name.end()) continue;
    const auto& ep = e.by_name.at(n);
    const auto& gp = git->second;
    if (part_list(ep) != part_list(gp)) {
      out.push_back(fmt::format("{}: parts {} expected, got {}", n, describe_parts(ep), describe_parts(gp)));
      continue;
    }
    for (const std::string& part : part_list(ep)) {
      auto pick = [&](const std::vector<const TensorDigest*>& v) {
        return *std::find_if(v.begin(), v.end(), [&](const TensorDigest* d) { return d->part == part; });
      };
      const TensorDigest& a = *pick(ep);
      const TensorDigest& b = *pick(gp);
      const std::string at = fmt::format("{} [{}]", n, part);
      if (a.dtype != b.dtype) {
        out.push_back(fmt::format("{}: dtype expected {}, got {}", at, a.dtype, b.dtype));
      } else if (a.shape != b.shape) {
        out.push_back(fmt::format("{}: shape expected {}, got {}", at, shape_str(a.shape), shape_str(b.shape)));
      } else if (a.precision != b.precision) {
        out.push_back(fmt::format("{}: precision expected {}, got {}", at, a.precision, b.precision));
      } else if (a.bytes != b.bytes) {
        out.push_back(fmt::format("{}: bytes expected {}, got {}", at, a.bytes, b.bytes));
      } else if (a.xxh3 != b.xxh3) {
        std::string line = fmt::format("{}: xxh3 expected {}, got {}", at, hex(a.xxh3), hex(b.xxh3));
        std::vector<std::string> holders;
        auto [lo, hi] = owner.equal_range(std::make_tuple(part, b.xxh3, b.bytes));
        for (auto it = lo; it != hi; ++it)
          if (it->second != n) holders.push_back(it->second);
        if (!holders.empty()) line += fmt::format(" (the bytes expected for {})", fmt::join(holders, ", "));
        out.push_back(std::move(line));
      }
    }
  }
  return out;
}

nlohmann::json digests_to_json(const std::vector<TensorDigest>& d) {
  nlohmann::json j = nlohmann::json::array();
  for (const TensorDigest& t : d)
    j.push_back({{"name", t.name},
                 {"part", t.part},
                 {"dtype", t.dtype},
                 {"shape", t.shape},
                 {"precision", t.precision},
                 {"xxh3", hex(t.xxh3)},
                 {"bytes", t.bytes}});
  return j;
}

std::vector<TensorDigest> digests_from_json(const nlohmann::json& j) {
  if (!j.is_array()) fail("digest manifest: expected a JSON array, got {}", j.type_name());
  std::vector<TensorDigest> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& e = j[i];
    if (!e.is_object()) fail("digest manifest: entry [{}] is not an object", i);
    auto field = [&](const char* key) -> const nlohmann::json& {
      if (!e.contains(key)) fail("digest manifest: entry [{}] has no \"{}\"", i, key);
      return e[key];
    };
    auto where = [&](const char* key) { return fmt::format("digest manifest: entry [{}] \"{}\"", i, key); };
    TensorDigest t;
    t.name = json_string(field("name"), where("name"));
    t.part = json_string(field("part"), where("part"));
    t.dtype = json_string(field("dtype"), where("dtype"));
    t.shape = json_integers(field("shape"), 0, std::numeric_limits<int64_t>::max(), where("shape"));
    t.precision = json_string(field("precision"), where("precision"));
    const std::string& h = json_string(field("xxh3"), where("xxh3"));
    if (h.size() != 16 || !std::all_of(h.begin(), h.end(), [](unsigned char c) { return std::isxdigit(c); }))
      fail("{}: '{}' is not 16 hex digits", where("xxh3"), h);
    t.xxh3 = std::stoull(h, nullptr, 16);
    t.bytes = json_integer(field("bytes"), 0, std::numeric_limits<int64_t>::max(), where("bytes"));
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace mxrl
