#include "model/plan.h"

#include <toml++/toml.h>

#include <fmt/format.h>
#include <algorithm>
#include <limits>

#include "model/precision.h"
#include "util/error.h"

namespace mxrl {

const char* precision_name(Precision p) { return precision_traits(p).name; }

std::string LinearPrecision::str() const {
  const PrecisionTraits& t = precision_traits(precision);
  if (t.wformat == WFormat::MX) return fmt::format("{}({},{})", t.name, elem_traits(elem).name, scale_rule_name(rule));
  if (t.wformat == WFormat::FP8) return fmt::format("{}({})", t.name, elem_traits(elem).name);
  return t.name;
}

std::vector<LinearPrecision> LinearPrecision::all() {
  // Element types only where the format has them (MX, FP8), scale rules only for MX: the rest print alike.
  std::vector<LinearPrecision> out;
  for (Precision p :
       {Precision::FP32, Precision::BF16, Precision::MXFP8, Precision::FP8Tensor, Precision::FP8Block128}) {
    const WFormat f = precision_traits(p).wformat;
    for (ElemType e : {ElemType::E4M3, ElemType::E5M2, ElemType::E2M3, ElemType::E3M2, ElemType::E2M1}) {
      if (e != ElemType::E4M3 && f != WFormat::MX && f != WFormat::FP8) continue;
      for (ScaleRule r : {ScaleRule::RCeil, ScaleRule::Floor}) {
        if (r != ScaleRule::RCeil && f != WFormat::MX) continue;
        out.push_back({p, e, r});
      }
    }
  }
  return out;
}

LinearPrecision LinearPrecision::parse(const std::string& s) {
  for (const LinearPrecision& lp : all())
    if (lp.str() == s) return lp;
  fail("unknown linear precision '{}' (e.g. fp32, bf16, mxfp8(e4m3,rceil), fp8-block128(e4m3))", s);
}

LinearPrecision PrecisionPlan::for_linear(LinearKind kind, int layer, int expert) const {
  if (kind == LinearKind::Router) return router;
  if (kind == LinearKind::LmHead) return lm_head;
  LinearPrecision p = decoder;
  auto has = [](const auto& v, auto x) { return v.empty() || std::find(v.begin(), v.end(), x) != v.end(); };
  for (const PlanOverride& o : overrides)
    if (has(o.layers, layer) && has(o.linears, kind) && (o.experts.empty() || has(o.experts, expert))) p = o.precision;
  return p;
}

std::vector<std::string> PrecisionPlan::names() {
  return {"fp32", "bf16", "mxfp8", "mxfp8-half", "mxfp8-floor", "fp8-block128", "fp8-tensor"};
}

PrecisionPlan PrecisionPlan::named(const std::string& name) {
  PrecisionPlan p;
  p.name = name;
  const LinearPrecision bf16{Precision::BF16};
  if (name == "fp32") {
    p.decoder = p.router = p.lm_head = {Precision::FP32};
    p.bf16_embeddings = false;
  } else if (name == "bf16") {
    p.decoder = bf16;
  } else if (name == "mxfp8" || name == "mxfp8-half" || name == "mxfp8-floor") {
    p.decoder = {Precision::MXFP8, ElemType::E4M3, name == "mxfp8-floor" ? ScaleRule::Floor : ScaleRule::RCeil};
    if (name == "mxfp8-half") {
      // Odd layers in BF16: an override over layers 1, 3, 5, ... (up to a generous bound).
      PlanOverride o;
      for (int l = 1; l < 4096; l += 2) o.layers.push_back(l);
      o.precision = bf16;
      p.overrides.push_back(o);
    }
  } else if (name == "fp8-block128") {
    p.decoder = {Precision::FP8Block128, ElemType::E4M3};
  } else if (name == "fp8-tensor") {
    p.decoder = {Precision::FP8Tensor, ElemType::E4M3};
  } else {
    fail("unknown precision plan '{}' (plans: {}; or a .toml file)", name, fmt::join(names(), ", "));
  }
  return p;
}

namespace {
Precision parse_precision(const std::string& s, const std::string& where) {
  for (Precision p : {Precision::FP32, Precision::BF16, Precision::MXFP8, Precision::FP8Tensor, Precision::FP8Block128})
    if (s == precision_name(p)) return p;
  fail("{}: unknown precision '{}' (fp32, bf16, mxfp8, fp8-tensor, fp8-block128)", where, s);
}

LinearKind parse_kind(const std::string& s, const std::string& where) {
  for (LinearKind k :
       {LinearKind::Q, LinearKind::K, LinearKind::V, LinearKind::O, LinearKind::Gate, LinearKind::Up, LinearKind::Down})
    if (s == linear_kind_name(k)) return k;
  fail("{}: unknown linear '{}' (q, k, v, o, gate, up, down)", where, s);
}

// precision (+ optional elem / scale_rule) from a table, with defaults.
LinearPrecision parse_linear(const toml::table& t, const std::string& key, LinearPrecision dflt,
                             const std::string& where) {
  LinearPrecision p = dflt;
  if (auto s = t[key].value<std::string>())
    p.precision = parse_precision(*s, where);
  else if (t.contains(key))
    fail("{}: '{}' must be a string", where, key);
  if (auto e = t["elem"].value<std::string>()) {
    auto el = elem_from_name(*e);
    if (!el) fail("{}: unknown elem '{}'", where, *e);
    p.elem = *el;
  }
  if (auto r = t["scale_rule"].value<std::string>()) {
    if (*r != "floor" && *r != "rceil") fail("{}: scale_rule must be floor or rceil, not '{}'", where, *r);
    p.rule = *r == "floor" ? ScaleRule::Floor : ScaleRule::RCeil;
  }
  return p;
}

template <typename T>
std::vector<T> int_list(const toml::table& t, const char* key, const std::string& where) {
  std::vector<T> out;
  if (!t.contains(key)) return out;
  const toml::array* a = t[key].as_array();
  if (!a) fail("{}: '{}' must be an array", where, key);
  for (const auto& x : *a) {
    const auto* v = x.as_integer();  // not value<int64_t>(), which also takes 2.0
    if (!v || v->get() < 0 || v->get() > std::numeric_limits<int>::max())
      fail("{}: '{}' must hold non-negative integers", where, key);
    out.push_back(static_cast<T>(v->get()));
  }
  return out;
}
}  // namespace

PrecisionPlan PrecisionPlan::load_toml(const std::string& path) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    fail("{}: invalid TOML at line {}: {}", path, e.source().begin.line, e.description());
  }
  static const char* known[] = {"name",    "default",    "elem",     "scale_rule", "router",
                                "lm_head", "embeddings", "kv_cache", "override"};
  for (const auto& kv : t) {
    const std::string_view key = kv.first.str();
    if (std::find(std::begin(known), std::end(known), key) == std::end(known)) fail("{}: unknown key '{}'", path, key);
  }
  PrecisionPlan p;
  p.name = t["name"].value_or(std::string("custom"));
  if (!t.contains("default")) fail("{}: missing 'default' precision", path);
  p.decoder = parse_linear(t, "default", {}, path);
  const LinearPrecision side{p.decoder.precision == Precision::FP32 ? Precision::FP32 : Precision::BF16};
  p.router = t.contains("router") ? parse_linear(t, "router", side, path) : side;
  p.lm_head = t.contains("lm_head") ? parse_linear(t, "lm_head", side, path) : side;
  const std::string emb = t["embeddings"].value_or(std::string(side.precision == Precision::FP32 ? "fp32" : "bf16"));
  if (emb != "fp32" && emb != "bf16") fail("{}: embeddings must be fp32 or bf16, not '{}'", path, emb);
  p.bf16_embeddings = emb == "bf16";
  const std::string kv = t["kv_cache"].value_or(std::string("fp32"));
  if (kv != "fp32" && kv != "fp8") fail("{}: kv_cache must be fp32 or fp8, not '{}'", path, kv);
  p.fp8_kv_cache = kv == "fp8";
  if (t.contains("override")) {
    const toml::array* arr = t["override"].as_array();
    if (!arr) fail("{}: 'override' must be an array of tables ([[override]])", path);
    int i = 0;
    for (const auto& node : *arr) {
      const std::string where = fmt::format("{}: override #{}", path, ++i);
      const toml::table* o = node.as_table();
      if (!o) fail("{}: not a table", where);
      PlanOverride ov;
      ov.layers = int_list<int>(*o, "layers", where);
      ov.experts = int_list<int>(*o, "experts", where);
      if (o->contains("linears")) {
        const toml::array* a = (*o)["linears"].as_array();
        if (!a) fail("{}: 'linears' must be an array", where);
        for (const auto& x : *a) {
          auto s = x.value<std::string>();
          if (!s) fail("{}: 'linears' must hold strings", where);
          ov.linears.push_back(parse_kind(*s, where));
        }
      }
      if (!o->contains("precision")) fail("{}: missing 'precision'", where);
      ov.precision = parse_linear(*o, "precision", p.decoder, where);
      p.overrides.push_back(ov);
    }
  }
  return p;
}

PrecisionPlan PrecisionPlan::resolve(const std::string& s) {
  if (s.size() > 5 && s.substr(s.size() - 5) == ".toml") return load_toml(s);
  const std::string suffix = "+fp8kv";
  if (s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0) {
    PrecisionPlan p = named(s.substr(0, s.size() - suffix.size()));
    p.name = s;
    p.fp8_kv_cache = true;
    return p;
  }
  return named(s);
}

}  // namespace mxrl
