// mxrl.ops: the forward pass's kernels one by one, for another engine (vLLM
// through an adapter) to run on its own tensors and get the learner's bits.
// Each op calls the library function forward() (model/model.cc) calls, in the
// same way; nothing is computed here. All ops share one thread pool
// (set_threads); mxrl's kernels give the same bits on any number of threads.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "arrays.h"
#include "kernels/ops/ops.h"
#include "model/linear.h"
#include "model/moe.h"
#include "model/plan.h"
#include "model/precision.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {

// ---- the shared pool ------------------------------------------------------

// One pool for every op; a call holds `mu` while it computes (a ThreadPool
// runs one parallel_for at a time), so ops from several Python threads queue.
struct OpsPool {
  std::unique_ptr<ThreadPool> pool;  // null: one thread
  std::mutex mu;
  int threads = 1;
};

std::shared_ptr<OpsPool> make_ops_pool(int threads) {
  auto p = std::make_shared<OpsPool>();
  p->threads = threads <= 0 ? ThreadPool::hardware_threads() : threads;
  if (p->threads > 1) p->pool = std::make_unique<ThreadPool>(p->threads);
  return p;
}

// Read and replaced with the GIL held. Never destroyed: no thread joins at exit.
std::shared_ptr<OpsPool>& ops_pool() {
  static auto* p = new std::shared_ptr<OpsPool>();
  if (!*p) *p = make_ops_pool(0);
  return *p;
}

// Runs f(exec) on the shared pool with the GIL released.
template <typename F>
void compute(F&& f) {
  std::shared_ptr<OpsPool> p = ops_pool();
  nb::gil_scoped_release unlocked;
  std::lock_guard<std::mutex> lock(p->mu);
  f(Exec{p->pool.get()});
}

// ---- argument checks --------------------------------------------------------

// A float32 C-contiguous array; its shape.
std::vector<int64_t> f32_arg(const AnyArray& a, const char* label) {
  require_f32(a, label);
  require_contiguous(a, label);
  return shape_of(a);
}

void require_ndim(const std::vector<int64_t>& s, size_t nd, const char* label, const char* what) {
  if (s.size() != nd) throw nb::value_error(fmt::format("{}: shape {} is not {}", label, shape_str(s), what).c_str());
}

// Rows of an array of shape [..., dim] (the product of the leading dimensions).
int64_t rows_of(const std::vector<int64_t>& s, const char* label) {
  if (s.empty()) throw nb::value_error(fmt::format("{}: a 0-d array has no last axis", label).c_str());
  int64_t r = 1;
  for (size_t i = 0; i + 1 < s.size(); ++i) r *= s[i];
  return r;
}

bool is_int(const AnyArray& a, int bits) {
  const nb::dlpack::dtype d = a.dtype();
  return d.lanes == 1 && d.bits == bits && d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Int);
}

// An int32 or int64 C-contiguous array as int64 values.
std::vector<int64_t> int_arg(const AnyArray& a, const char* label) {
  if (!is_int(a, 32) && !is_int(a, 64))
    throw nb::type_error(
        fmt::format("{}: dtype {} is not supported; expected int64 or int32", label, dtype_str(a)).c_str());
  require_contiguous(a, label);
  const size_t n = a.size();
  std::vector<int64_t> v(n);
  if (is_int(a, 32))
    std::copy_n(static_cast<const int32_t*>(a.data()), n, v.begin());
  else
    std::copy_n(static_cast<const int64_t*>(a.data()), n, v.begin());
  return v;
}

const float* fdata(const AnyArray& a) { return static_cast<const float*>(a.data()); }

// ---- precisions and plans ---------------------------------------------------

// Every string LinearPrecision::parse accepts.
std::vector<std::string> precision_strings() {
  std::vector<std::string> out;
  for (const LinearPrecision& p : LinearPrecision::all()) out.push_back(p.str());
  return out;
}

// LinearPrecision::parse, plus "mxfp8" for mxfp8(e4m3,rceil).
LinearPrecision parse_precision(const std::string& s) {
  if (s == "mxfp8") return {Precision::MXFP8, ElemType::E4M3, ScaleRule::RCeil};
  try {
    return LinearPrecision::parse(s);
  } catch (const Error&) {
    throw nb::value_error(
        fmt::format("precision '{}': expected mxfp8 or one of {}", s, fmt::join(precision_strings(), ", ")).c_str());
  }
}

LinearKind parse_kind(const std::string& s) {
  std::vector<std::string> names;
  for (int i = 0; i <= static_cast<int>(LinearKind::LmHead); ++i) {
    const auto k = static_cast<LinearKind>(i);
    if (s == linear_kind_name(k)) return k;
    names.push_back(linear_kind_name(k));
  }
  throw nb::value_error(fmt::format("linear '{}': expected one of {}", s, fmt::join(names, ", ")).c_str());
}

bool is_mx(const LinearPrecision& p) { return precision_traits(p.precision).wformat == WFormat::MX; }

// ---- Linear -------------------------------------------------------------------

struct PyLinear {
  std::shared_ptr<const PreparedLinear> L;
};

PyLinear make_linear(std::optional<AnyArray> weight, std::optional<AnyArray> codes, std::optional<AnyArray> scales,
                     const std::string& precision, const std::string& name) {
  const LinearPrecision prec = parse_precision(precision);
  auto L = std::make_shared<PreparedLinear>();
  if (weight) {
    if (codes || scales)
      throw nb::value_error(fmt::format("{}: pass weight, or codes and scales, not both", name).c_str());
    const auto s = f32_arg(*weight, "weight");
    require_ndim(s, 2, "weight", "[n, k]");
    compute([&](const Exec& ex) { *L = PreparedLinear::prepare(name, fdata(*weight), s[0], s[1], prec, ex); });
    return {L};
  }
  if (!codes || !scales) throw nb::value_error(fmt::format("{}: pass weight, or both codes and scales", name).c_str());
  if (!is_mx(prec))
    throw nb::value_error(
        fmt::format("{}: codes and scales are an MX payload; precision {} is not an mxfp8 one", name, prec.str())
            .c_str());
  const bool e4m3 = prec.elem == ElemType::E4M3, e5m2 = prec.elem == ElemType::E5M2;
  require_bytes(*codes, "codes",
                e4m3   ? kDLFloat8E4M3FN
                : e5m2 ? kDLFloat8E5M2
                       : -1,
                e4m3   ? "float8_e4m3fn"
                : e5m2 ? "float8_e5m2"
                       : nullptr);
  require_bytes(*scales, "scales", kDLFloat8E8M0FNU, "float8_e8m0fnu");
  require_contiguous(*codes, "codes");
  require_contiguous(*scales, "scales");
  const auto cs = shape_of(*codes), ss = shape_of(*scales);
  require_ndim(cs, 2, "codes", "[n, k]");
  if (cs[1] % kMxBlock != 0)
    throw nb::value_error(
        fmt::format("{}: codes of shape {}: k must be a multiple of {}", name, shape_str(cs), kMxBlock).c_str());
  if (ss != std::vector<int64_t>{cs[0], cs[1] / kMxBlock})
    throw nb::value_error(fmt::format("{}: scales of shape {} do not fit codes of shape {} (expected [{}, {}])", name,
                                      shape_str(ss), shape_str(cs), cs[0], cs[1] / kMxBlock)
                              .c_str());
  L->name = name;
  L->prec = prec;
  L->n = cs[0];
  L->k = cs[1];
  const auto* c = static_cast<const uint8_t*>(codes->data());
  const auto* sc = static_cast<const uint8_t*>(scales->data());
  L->codes.assign(c, c + cs[0] * cs[1]);
  L->mx_scales.assign(sc, sc + ss[0] * ss[1]);
  compute([&](const Exec& ex) { L->validate_and_pack(ex); });
  return {L};
}

// y[m, n] = PreparedLinear::forward(x[m, k]).
nb::ndarray<nb::numpy, float> linear_forward(const PyLinear& self, AnyArray x) {
  const PreparedLinear& L = *self.L;
  const auto s = f32_arg(x, "x");
  if (s.size() != 2 || s[1] != L.k)
    throw nb::value_error(fmt::format("{}: x of shape {} does not fit [m, {}] (the linear is [{}, {}])", L.name,
                                      shape_str(s), L.k, L.n, L.k)
                              .c_str());
  float* y = nullptr;
  auto out = new_array<float>({s[0], L.n}, &y);
  if (s[0] > 0)
    compute([&](const Exec& ex) {
      std::vector<float> scratch;
      L.forward(fdata(x), s[0], y, scratch, ex);
    });
  return out;
}

nb::ndarray<nb::numpy, uint8_t> linear_bytes(const PyLinear& self, bool want_scales) {
  const PreparedLinear& L = *self.L;
  if (!is_mx(L.prec))
    throw nb::value_error(fmt::format("{}: {} holds no MX codes and scales", L.name, L.prec.str()).c_str());
  const std::vector<uint8_t>& v = want_scales ? L.mx_scales : L.codes;
  uint8_t* p = nullptr;
  auto out = new_array<uint8_t>({L.n, want_scales ? L.k / kMxBlock : L.k}, &p);
  std::copy(v.begin(), v.end(), p);
  return out;
}

// ---- MoeExperts ------------------------------------------------------------------

struct PyMoeExperts {
  std::vector<PyLinear> held;  // keeps the linears alive
  std::vector<ExpertLinears> experts;
  int64_t H = 0;
};

PyMoeExperts make_moe(const std::vector<PyLinear>& gate, const std::vector<PyLinear>& up,
                      const std::vector<PyLinear>& down) {
  if (gate.empty() || gate.size() != up.size() || gate.size() != down.size())
    throw nb::value_error(
        fmt::format("MoeExperts: gate, up and down need one linear per expert each, got {}, {} and {}", gate.size(),
                    up.size(), down.size())
            .c_str());
  PyMoeExperts m;
  m.H = gate[0].L->k;
  for (size_t e = 0; e < gate.size(); ++e) {
    const PreparedLinear &g = *gate[e].L, &u = *up[e].L, &d = *down[e].L;
    if (g.k != m.H || u.k != m.H || u.n != g.n || d.n != m.H || d.k != g.n)
      throw nb::value_error(fmt::format("MoeExperts: expert {}: gate [{}, {}], up [{}, {}], down [{}, {}] do not fit "
                                        "gate/up [F, {}], down [{}, F]",
                                        e, g.n, g.k, u.n, u.k, d.n, d.k, m.H, m.H)
                                .c_str());
    m.held.insert(m.held.end(), {gate[e], up[e], down[e]});
    m.experts.push_back({&g, &u, &d});
  }
  return m;
}

// y[m, H] = moe_experts(x[m, H], experts[m, K], weights[m, K]).
nb::ndarray<nb::numpy, float> moe_forward(const PyMoeExperts& self, AnyArray x, AnyArray experts, AnyArray weights) {
  const auto xs = f32_arg(x, "x");
  if (xs.size() != 2 || xs[1] != self.H)
    throw nb::value_error(fmt::format("MoeExperts: x of shape {} is not [m, {}]", shape_str(xs), self.H).c_str());
  const auto ws = f32_arg(weights, "weights");
  require_ndim(ws, 2, "weights", "[m, top_k]");
  const std::vector<int64_t> ids = int_arg(experts, "experts");
  const auto es = shape_of(experts);
  if (es != ws || es[0] != xs[0])
    throw nb::value_error(fmt::format("MoeExperts: experts {} and weights {} must both be [m, top_k] with m = {}",
                                      shape_str(es), shape_str(ws), xs[0])
                              .c_str());
  const int64_t E = static_cast<int64_t>(self.experts.size());
  std::vector<int32_t> ids32(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= E)
      throw nb::value_error(fmt::format("MoeExperts: experts holds id {}, outside [0, {})", ids[i], E).c_str());
    ids32[i] = static_cast<int32_t>(ids[i]);
  }
  float* y = nullptr;
  auto out = new_array<float>({xs[0], self.H}, &y);
  compute([&](const Exec& ex) {
    ForwardWorkspace w;
    moe_experts(self.experts, fdata(x), xs[0], self.H, ids32.data(), fdata(weights), ws[1], y, w, ex);
  });
  return out;
}

// ---- the other ops ---------------------------------------------------------------

nb::ndarray<nb::numpy, float> py_rmsnorm(AnyArray x, AnyArray w, float eps) {
  const auto xs = f32_arg(x, "x"), ws = f32_arg(w, "w");
  const int64_t rows = rows_of(xs, "x");
  if (ws.size() != 1 || ws[0] != xs.back())
    throw nb::value_error(
        fmt::format("w: shape {} is not [{}] (x's last dimension)", shape_str(ws), xs.back()).c_str());
  float* y = nullptr;
  auto out = new_array<float>(xs, &y);
  compute([&](const Exec& ex) { rmsnorm_forward(y, fdata(x), fdata(w), rows, xs.back(), eps, ex); });
  return out;
}

// As forward(): RopeTable::make(head_dim, theta), each token's angles, rope_forward.
nb::ndarray<nb::numpy, float> py_rope(AnyArray x, AnyArray positions, double theta) {
  const auto xs = f32_arg(x, "x");
  require_ndim(xs, 3, "x", "[T, heads, head_dim]");
  const std::vector<int64_t> pos = int_arg(positions, "positions");
  if (shape_of(positions) != std::vector<int64_t>{xs[0]})
    throw nb::value_error(
        fmt::format("positions: shape {} is not [{}] (x's tokens)", shape_str(shape_of(positions)), xs[0]).c_str());
  const int64_t T = xs[0], heads = xs[1], hd = xs[2], half = hd / 2;
  if (hd % 2 != 0) throw nb::value_error(fmt::format("x: head_dim {} is odd", hd).c_str());
  if (!(theta > 0) || !std::isfinite(theta)) throw nb::value_error("theta must be positive");
  for (int64_t p : pos)
    if (p < 0) throw nb::value_error(fmt::format("positions: {} is negative", p).c_str());
  float* y = nullptr;
  auto out = new_array<float>(xs, &y);
  compute([&](const Exec& ex) {
    std::memcpy(y, fdata(x), T * heads * hd * sizeof(float));
    const RopeTable table = RopeTable::make(hd, theta);
    parallel_for(ex.pool, T, [&](int64_t b, int64_t e) {
      std::vector<float> cs(half), sn(half);
      for (int64_t t = b; t < e; ++t) {
        table.angles(pos[t], cs.data(), sn.data());
        rope_forward(&y[t * heads * hd], heads, hd, cs.data(), sn.data(), ex);
      }
    });
  });
  return out;
}

nb::ndarray<nb::numpy, float> py_swiglu(AnyArray gate, AnyArray up) {
  const auto gs = f32_arg(gate, "gate"), us = f32_arg(up, "up");
  if (gs != us)
    throw nb::value_error(fmt::format("up: shape {} differs from gate's {}", shape_str(us), shape_str(gs)).c_str());
  float* h = nullptr;
  auto out = new_array<float>(gs, &h);
  compute([&](const Exec& ex) { swiglu_forward(h, fdata(gate), fdata(up), static_cast<int64_t>(gate.size()), ex); });
  return out;
}

// As forward(): attention_forward_group for each KV group g, kv_stride = kv_heads * hd.
nb::ndarray<nb::numpy, float> py_attention(AnyArray q, AnyArray k, AnyArray v, int64_t p0,
                                           std::optional<double> scale) {
  const auto qs = f32_arg(q, "q"), ks = f32_arg(k, "k"), vs = f32_arg(v, "v");
  require_ndim(qs, 3, "q", "[T, heads, head_dim]");
  require_ndim(ks, 3, "k", "[npos, kv_heads, head_dim]");
  if (vs != ks)
    throw nb::value_error(fmt::format("v: shape {} differs from k's {}", shape_str(vs), shape_str(ks)).c_str());
  const int64_t T = qs[0], heads = qs[1], hd = qs[2], npos = ks[0], kvh = ks[1];
  if (ks[2] != hd) throw nb::value_error(fmt::format("k: head_dim {} differs from q's {}", ks[2], hd).c_str());
  if (kvh < 1 || heads % kvh != 0)
    throw nb::value_error(fmt::format("q: {} heads are not a multiple of k's {} kv_heads", heads, kvh).c_str());
  if (p0 < 0 || npos < p0 + T)
    throw nb::value_error(
        fmt::format("k: {} positions do not hold the keys of tokens at positions {}..{}", npos, p0, p0 + T - 1)
            .c_str());
  const float sc = scale ? static_cast<float>(*scale) : 1.0f / std::sqrt(static_cast<float>(hd));
  float* out = nullptr;
  auto res = new_array<float>(qs, &out);
  if (T > 0)
    compute([&](const Exec& ex) {
      parallel_for(ex.pool, kvh, [&](int64_t a, int64_t e) {
        for (int64_t g = a; g < e; ++g)
          attention_forward_group(out, fdata(q), T, p0, fdata(k) + g * hd, fdata(v) + g * hd, kvh * hd, heads, kvh, hd,
                                  g, sc, ex);
      });
    });
  return res;
}

nb::ndarray<nb::numpy, float> py_log_softmax(AnyArray logits) {
  const auto s = f32_arg(logits, "logits");
  const int64_t rows = rows_of(s, "logits");
  if (s.back() < 1) throw nb::value_error("logits: the last dimension is empty");
  float* y = nullptr;
  auto out = new_array<float>(s, &y);
  compute([&](const Exec& ex) { log_softmax_forward(y, fdata(logits), rows, s.back(), ex); });
  return out;
}

nb::tuple py_moe_route(AnyArray router_logits, int64_t top_k, bool renormalize) {
  const auto s = f32_arg(router_logits, "router_logits");
  require_ndim(s, 2, "router_logits", "[rows, num_experts]");
  if (top_k < 1 || top_k > s[1])
    throw nb::value_error(fmt::format("top_k {} is outside [1, {}] (the experts)", top_k, s[1]).c_str());
  int32_t* ex_ids = nullptr;
  float* w = nullptr;
  auto experts = new_array<int32_t>({s[0], top_k}, &ex_ids);
  auto weights = new_array<float>({s[0], top_k}, &w);
  compute([&](const Exec& ex) { moe_route(ex_ids, w, fdata(router_logits), s[0], s[1], top_k, renormalize, ex); });
  return nb::make_tuple(experts, weights);
}

std::string plan_precision(const std::string& plan, const std::string& linear, int layer, int expert) {
  const LinearKind kind = parse_kind(linear);
  return PrecisionPlan::resolve(plan).for_linear(kind, layer, expert).str();
}

nb::dict plan_info(const std::string& plan) {
  const PrecisionPlan p = PrecisionPlan::resolve(plan);
  nb::dict d;
  d["name"] = p.name;
  d["bf16_embeddings"] = p.bf16_embeddings;
  d["fp8_kv_cache"] = p.fp8_kv_cache;
  return d;
}

void set_threads(int n) {
  if (n < 0) throw nb::value_error(fmt::format("set_threads: {} threads (0: every hardware thread)", n).c_str());
  ops_pool() = make_ops_pool(n);
}

}  // namespace

void bind_ops(nb::module_& parent) {
  nb::module_ m = parent.def_submodule(
      "ops", "The forward pass's kernels one by one (mxrl.ops): the learner's bits on another engine's tensors.");

  nb::class_<PyLinear>(m, "Linear", "A linear layer prepared as the model prepares it (PreparedLinear).")
      .def(
          "__init__",
          [](PyLinear* self, std::optional<AnyArray> weight, std::optional<AnyArray> codes,
             std::optional<AnyArray> scales, const std::string& precision,
             const std::string& name) { new (self) PyLinear(make_linear(weight, codes, scales, precision, name)); },
          nb::arg("weight") = nb::none(), nb::kw_only(), nb::arg("codes") = nb::none(), nb::arg("scales") = nb::none(),
          nb::arg("precision") = "bf16", nb::arg("name") = "linear",
          R"doc(weight: float32 [n, k], the FP32 master: prepared as the model prepares a linear
(its BF16 compute copy, then the precision's quantization: for mxfp8, 1x32 blocks along k,
E4M3 codes and E8M0 scales). Or codes (uint8 or float8_e4m3fn [n, k]) and scales
(uint8 [n, k/32]): an MX payload as shipped, validated and packed (precision must be mxfp8).
precision: fp32, bf16, mxfp8 (= mxfp8(e4m3,rceil)), mxfp8(e4m3,floor), fp8-block128(e4m3), ...
name: used in error messages.)doc")
      .def_prop_ro(
          "n", [](const PyLinear& l) { return l.L->n; }, "Out features.")
      .def_prop_ro(
          "k", [](const PyLinear& l) { return l.L->k; }, "In features.")
      .def_prop_ro(
          "precision", [](const PyLinear& l) { return l.L->prec.str(); }, "The canonical precision string.")
      .def_prop_ro("name", [](const PyLinear& l) { return l.L->name; })
      .def("forward", &linear_forward, nb::arg("x"),
           "y float32 [m, n] = x [m, k] quantized as the precision quantizes activations, times W^T "
           "(PreparedLinear::forward).")
      .def(
          "codes", [](const PyLinear& l) { return linear_bytes(l, false); },
          "The MX element codes [n, k] (uint8 copy); ValueError for other precisions.")
      .def(
          "scales", [](const PyLinear& l) { return linear_bytes(l, true); },
          "The E8M0 scales [n, k/32] (uint8 copy); ValueError for other precisions.")
      .def("__repr__", [](const PyLinear& l) {
        return fmt::format("Linear(name='{}', n={}, k={}, precision='{}')", l.L->name, l.L->n, l.L->k, l.L->prec.str());
      });

  nb::class_<PyMoeExperts>(m, "MoeExperts", "A MoE layer's experts: the expert loop of forward() (moe_experts).")
      .def(
          "__init__",
          [](PyMoeExperts* self, const std::vector<PyLinear>& gate, const std::vector<PyLinear>& up,
             const std::vector<PyLinear>& down) { new (self) PyMoeExperts(make_moe(gate, up, down)); },
          nb::arg("gate"), nb::arg("up"), nb::arg("down"),
          "One Linear per expert in each list: gate/up [F, H], down [H, F].")
      .def_prop_ro("num_experts", [](const PyMoeExperts& m) { return m.experts.size(); })
      .def("forward", &moe_forward, nb::arg("x"), nb::arg("experts"), nb::arg("weights"),
           R"doc(y float32 [m, H] from x [m, H] and moe_route's experts (int32 or int64) and weights
[m, top_k]: each expert in ascending order runs gate/up (one activation quantization), SwiGLU
and down on its rows, and y accumulates y + out * weight from 0: bit for bit forward()'s MoE.)doc");

  m.def("rmsnorm", &py_rmsnorm, nb::arg("x"), nb::arg("w"), nb::arg("eps"),
        "y = w * x * rsqrt(mean(x^2) + eps) over the last axis of x [..., dim]; w [dim] (rmsnorm_forward).");
  m.def("rope", &py_rope, nb::arg("x"), nb::arg("positions"), nb::arg("theta"),
        "x [T, heads, head_dim] rotated as forward() rotates q and k (non-interleaved, rotate_half) at "
        "positions [T] (int64 or int32) with base theta.");
  m.def("swiglu", &py_swiglu, nb::arg("gate"), nb::arg("up"), "h = silu(gate) * up (same shapes).");
  m.def("attention", &py_attention, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("p0"),
        nb::arg("scale") = nb::none(),
        R"doc(Causal attention of one sequence: q [T, heads, hd] of the tokens at positions p0 .. p0+T-1,
k and v [npos, kv_heads, hd] the sequence's keys and values at positions 0 .. npos-1
(npos >= p0 + T); token t sees keys 0 .. p0+t. scale: default 1/sqrt(hd) in float32.
Returns out [T, heads, hd] (attention_forward_group per KV group, as forward()).)doc");
  m.def("log_softmax", &py_log_softmax, nb::arg("logits"), "The log-softmax of each row of logits [rows, n].");
  m.def("moe_route", &py_moe_route, nb::arg("router_logits"), nb::arg("top_k"), nb::arg("renormalize"),
        "(experts int32 [rows, top_k], weights float32 [rows, top_k]) from router_logits [rows, E]: softmax, "
        "top-k (ties: lower index), renormalized over the k when asked (config norm_topk_prob).");
  m.def("plan_precision", &plan_precision, nb::arg("plan"), nb::arg("linear"), nb::arg("layer") = -1,
        nb::arg("expert") = -1,
        "The precision string a plan gives one linear (q, k, v, o, gate, up, down, router, lm_head) of a "
        "layer (and expert): what Linear(precision=...) takes.");
  m.def("plan_info", &plan_info, nb::arg("plan"),
        "A plan's name, bf16_embeddings (embeddings and norm weights as their BF16 rounding) and fp8_kv_cache.");
  m.def("set_threads", &set_threads, nb::arg("n"),
        "Threads of the pool every op runs on (0: every hardware thread, the default). Results do not depend on it.");
  m.def(
      "get_threads", [] { return ops_pool()->threads; }, "Threads of the ops' pool.");
}

}  // namespace mxrl
