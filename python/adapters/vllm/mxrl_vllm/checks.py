"""The seven sync checks on a live vLLM engine, on what it computes with.

vLLM's parameter list does not show what its CPU build computes with: it
re-packs BF16 linears (and the head) into GEMM closures and leaves
zero-length ``weight`` parameters behind. So ``view`` reads each tensor from
where the computation takes it:

- embeddings and norms: the parameters (the ops read them directly);
- every linear (fused qkv and gate/up, o/down, the router, the head): the
  layer's own op (``quant_method.apply``) run on the identity matrix, which
  returns the weight the op multiplies by, exactly (one non-zero product per
  output, accumulated in FP32, rounded to the layer's dtype that already holds
  it); for mxrl's MXFP8 kernel, also its E4M3 codes and E8M0 scales, bytes;
- routed experts: the parameters, plus a probe of the layer's own fused op
  against the same computation from those parameters (a stale pre-packed copy
  shows as a different output).

The checks then compare that view with the learner's bundle, tensor by
tensor, with the native checks' wording: 1-4 (coverage, placement, grid,
exceptions) from one comparison, 5 freshness (derived copies against their
sources, the prefix cache, the version), 6 atomicity (the rollout's versions,
and after a failed sync the previous version whole), 7 agreement (the
engine's prompt log-probs on the held-out probe against the learner's
logits). A tensor whose layout the checker cannot read is a coverage finding,
never a pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import numpy as np

import mxrl

from .bundle import Expected
from .engine import Layout, VllmEngine

NAMES = ["coverage", "placement", "grid", "exceptions", "freshness", "atomicity", "agreement"]


@dataclass
class Live:
    name: str
    values: np.ndarray  # float32: what the op computes with
    dtype: str  # what the engine holds it as: BF16 | F32 | F8_E4M3
    codes: Optional[np.ndarray] = None  # visible MX bytes (mxrl's kernel)
    scales: Optional[np.ndarray] = None
    source: Optional[np.ndarray] = None  # float32 values of the parameter the op's copy derives from, if visible


_DT = {"torch.bfloat16": "BF16", "torch.float32": "F32", "torch.float8_e4m3fn": "F8_E4M3"}


def _read_model(model: Any, layout: Layout) -> Dict[str, Any]:
    """Runs in the worker: raw readouts as numpy (names are vLLM's)."""
    import torch

    def np32(t):
        return t.detach().to(torch.float32).cpu().numpy()

    out: Dict[str, Any] = {"params": {}, "ops": {}, "unreadable": [], "experts": {}}
    for name, p in model.named_parameters():
        if p.is_meta:
            out["unreadable"].append((name, "a meta tensor: it holds no values (a refit left it unloaded)"))
            continue
        if p.numel() > 0 and p.ndim == 1:
            out["params"][name] = (np32(p), _DT.get(str(p.dtype), str(p.dtype)))
    if not model.model.embed_tokens.weight.is_meta:
        out["params"]["model.embed_tokens.weight"] = (np32(model.model.embed_tokens.weight[: layout.vocab]),
                                                      _DT.get(str(model.model.embed_tokens.weight.dtype)))
    act = model.model.embed_tokens.weight.dtype
    for name, m in model.named_modules():
        qm = getattr(m, "quant_method", None)
        if qm is None or name == "model.embed_tokens":
            continue
        if hasattr(m, "w13_weight"):  # routed experts
            out["experts"][name] = _read_experts(m, np32)
            continue
        if not (hasattr(m, "input_size") or hasattr(m, "embedding_dim")):
            continue  # not a weight-holding layer (attention's KV-cache method)
        if not hasattr(qm, "apply"):
            out["unreadable"].append((name, type(qm).__name__))
            continue
        k = m.embedding_dim if hasattr(m, "embedding_dim") else m.input_size
        try:
            with torch.no_grad():
                y = qm.apply(m, torch.eye(k, dtype=act))
        except Exception as e:  # noqa: BLE001 - a layer the probe cannot run is reported, not skipped
            out["unreadable"].append((name, f"{type(qm).__name__}: {e}"))
            continue
        w = getattr(m, "weight", None)
        rec = {"values": np32(y.t()), "dtype": _DT.get(str(w.dtype), str(w.dtype)) if w is not None else "?"}
        if w is not None and not w.is_meta and w.dtype == torch.float8_e4m3fn:
            rec["codes"] = w.detach().view(torch.uint8).cpu().numpy().copy()
            rec["dtype"] = "F8_E4M3"
        sc = getattr(m, "weight_scale", None)
        if sc is not None and not sc.is_meta and sc.dtype == torch.uint8:
            rec["scales"] = sc.detach().cpu().numpy().copy()
        if w is not None and not w.is_meta and w.numel() > 0 and w.ndim == 2 and w.dtype != torch.float8_e4m3fn:
            rec["source"] = np32(w)
        out["ops"][name] = rec
    return out


def _read_experts(m: Any, np32) -> Dict[str, Any]:
    """Probes the layer's own fused expert op, one expert at a time.

    The CPU build keeps the experts pre-packed in the parameters' storage, so
    the parameters cannot be read as weights; instead each expert e gets the
    same probe tokens routed to it alone (weight 1), and the output is
    compared with the learner's expert e computing the same tokens.
    """
    import torch

    w13 = m.w13_weight
    rec: Dict[str, Any] = {"dtype": _DT.get(str(w13.dtype), str(w13.dtype))}
    try:
        E, H = w13.shape[0], w13.shape[2]
        T = 16
        g = torch.Generator().manual_seed(0)
        x = torch.randn(T, H, generator=g).to(w13.dtype)
        ys = []
        for e in range(E):
            ids = torch.tensor([[e, (e + 1) % E]] * T, dtype=torch.int32)
            w = torch.tensor([[1.0, 0.0]] * T, dtype=torch.float32)
            with torch.no_grad():
                y = m.quant_method.apply(m, x, w, ids, None, None)
            ys.append(np32(y if torch.is_tensor(y) else y[0]))
        rec["x"], rec["y"] = np32(x), np.stack(ys)
        # The storage itself: the CPU build keeps its pre-pack there, so checkpoint-layout values
        # found in it mean the pre-pack was never rebuilt from what a refit wrote.
        rec["w13"], rec["w2"] = np32(m.w13_weight[:1]), np32(m.w2_weight[:1])
    except Exception as e:  # noqa: BLE001 - reported as a layout the checker cannot read
        rec["error"] = f"{type(e).__name__}: {e}"
    return rec


def view(engine: VllmEngine) -> Dict[str, Any]:
    """What the engine computes with, per mxrl tensor name, and what could not be read."""
    lay = engine.layout
    raw = engine.call(lambda model: _read_model(model, lay))
    live: Dict[str, Live] = {}
    for name, (vals, dt) in raw["params"].items():
        if "experts" in name:
            continue
        live[name] = Live(name, vals, dt)
    q, kv = lay.heads * lay.head_dim, lay.kv_heads * lay.head_dim
    for name, rec in raw["ops"].items():
        if name.endswith("qkv_proj"):
            base = name[: -len("qkv_proj")]
            parts = [(base + "q_proj.weight", 0, q), (base + "k_proj.weight", q, q + kv),
                     (base + "v_proj.weight", q + kv, q + 2 * kv)]
        elif name.endswith("gate_up_proj"):
            base = name[: -len("gate_up_proj")]
            i = rec["values"].shape[0] // 2
            parts = [(base + "gate_proj.weight", 0, i), (base + "up_proj.weight", i, 2 * i)]
        elif name == "lm_head":
            parts = [("lm_head.weight", 0, lay.vocab)]
        else:
            parts = [(name + ".weight", 0, rec["values"].shape[0])]
        for n, a, b in parts:
            lv = Live(n, rec["values"][a:b], rec["dtype"])
            if "codes" in rec:
                lv.codes = rec["codes"][a:b]
            if "scales" in rec:
                lv.scales = rec["scales"][a:b]
            if "source" in rec:
                lv.source = rec["source"][a:b]
            live[n] = lv
    if lay.tied and "lm_head.weight" in live and "model.embed_tokens.weight" in live:
        live["lm_head.weight"].source = live["model.embed_tokens.weight"].values
    probes = {}
    for name, rec in raw["experts"].items():
        probes[name.split(".mlp.")[0]] = rec
    return {"live": live, "unreadable": raw["unreadable"], "experts": probes,
            "kernels": getattr(engine, "kernels", "vllm"), "plan": getattr(engine, "plan", None)}


# ------------------------------------------------------------------------------------------ 1-4
def _key(a: np.ndarray) -> bytes:
    """Values as a lookup key; -0 as +0 (the identity probe reads a -0 weight as +0)."""
    return np.ascontiguousarray(a + np.float32(0)).tobytes()


def _diff_line(a: np.ndarray, b: np.ndarray) -> str:
    n = int(np.count_nonzero((a != b) & ~(np.isnan(a) & np.isnan(b))))
    with np.errstate(invalid="ignore"):
        m = float(np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
    return f"{n} of {a.size} values differ from the learner's (max |diff| {m:.3g})"


def check_tensors(exp: Expected, prev: Optional[Expected], v: Dict[str, Any]) -> Dict[str, List[str]]:
    live: Dict[str, Live] = v["live"]
    f: Dict[str, List[str]] = {k: [] for k in NAMES[:4]}
    for name, why in v["unreadable"]:
        f["coverage"].append(f"{name}: the checker cannot read what the engine computes with ({why})")
    probed = _check_experts(exp, prev, v["experts"], f, _expert_ref(v.get("kernels", "vllm"), v.get("plan")))
    for name in exp.tensors:
        if name not in live and name not in probed:
            f["coverage"].append(f"missing {name}: the sampler does not compute with it")
    for name in live:
        if name not in exp.tensors:
            f["coverage"].append(f"extra {name}: not expected under the sampler's plan")
    by_values, by_bytes = {}, {}
    for n, t in exp.tensors.items():
        by_values.setdefault((t.values.shape, _key(t.values)), n)
        if t.mx:
            for part in ("codes", "scales"):
                a = getattr(t, part)
                by_bytes.setdefault((part, a.shape, a.tobytes()), n)
    for name, e in exp.tensors.items():
        g = live.get(name)
        if g is None:
            continue
        if g.values.shape != e.values.shape:
            f["placement"].append(f"{name}: shape {list(g.values.shape)}, expected {list(e.values.shape)}")
            continue
        bucket = f["grid"] if e.mx else f["exceptions"]
        p = prev.tensors.get(name) if prev else None
        if e.mx and g.codes is not None:  # the bytes are visible: byte for byte
            for part in ("codes", "scales"):
                got, want = getattr(g, part), getattr(e, part)
                if got is None or got.shape != want.shape:
                    f["placement"].append(f"{name} [{part}]: shape {None if got is None else list(got.shape)}, "
                                          f"expected {list(want.shape)}")
                elif not np.array_equal(got, want):
                    old = p is not None and np.array_equal(got, getattr(p, part))
                    other = "codes" if part == "scales" else "scales"
                    others_new = np.array_equal(getattr(g, other), getattr(e, other))
                    o = by_bytes.get((part, got.shape, got.tobytes()))
                    if o is not None and o != name:
                        f["placement"].append(f"{name} [{part}]: holds the bytes of {o} [{part}]")
                    elif old and not others_new:
                        f["coverage"].append(f"{name} [{part}]: still holds the previous version's bytes "
                                             "(not written by this sync)")
                    elif old:
                        f["grid"].append(f"{name} [{part}]: still holds the previous version's bytes beside this "
                                         "version's other parts")
                    else:
                        f["grid"].append(f"{name} [{part}]: bytes differ from the learner's "
                                         f"({int(np.count_nonzero(got != want))} of {want.size})")
            continue
        # kernels="mxrl": an FP32 engine whose ops are mxrl's; a tensor it holds as F32 computes as the
        # learner's BF16 when its values are the BF16 values, which the comparison below checks exactly.
        mxrl_f32 = v.get("kernels") == "mxrl" and g.dtype == "F32" and e.dtype == "BF16"
        if not e.mx and g.dtype != e.dtype and not mxrl_f32:
            f["exceptions"].append(f"{name}: the engine holds it as {g.dtype}, the learner computes it as {e.dtype}")
        # Values compare as numbers: the identity probe cannot see the sign of a zero weight
        # (-0 + 0 = +0), and neither can any product the layer computes.
        if np.array_equal(g.values, e.values, equal_nan=True):
            continue
        if p is not None and p.values.shape == g.values.shape and np.array_equal(g.values, p.values):
            f["coverage"].append(f"{name}: still holds the previous version's values (not written by this sync)")
            continue
        o = by_values.get((g.values.shape, _key(g.values)))
        if o is not None and o != name:
            f["placement"].append(f"{name}: holds the values of {o}")
        elif g.values.ndim == 2 and g.values.shape[0] == g.values.shape[1] and np.array_equal(g.values.T, e.values):
            f["placement"].append(f"{name}: holds the learner's weight transposed")
        else:
            bucket.append(f"{name}: {_diff_line(g.values, e.values)}")
    return f


def _expert_out(x: np.ndarray, gate: np.ndarray, up: np.ndarray, down: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    g, u = x @ gate.T.astype(np.float64), x @ up.T.astype(np.float64)
    return (g / (1 + np.exp(-g)) * u) @ down.T.astype(np.float64)


def _rel(y: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(y - ref) / max(float(np.linalg.norm(ref)), 1e-30))


# The probe runs in BF16 (inputs, weights, the intermediate): its relative error against the exact
# computation is about 2e-3 (1.7e-3 to 2.0e-3 measured on the tiny MoE). One GRPO step at lr 5e-4
# moves an expert's output by 1e-2 to 5e-2 (or not at all when no token reached it), a wrong,
# swapped or scrambled expert by about 1. So an expert one step stale is told from a fresh one;
# a change below the tolerance (a handful of codes) is not, and is harmless to the same degree.
EXPERT_TOL = 1e-2


def _expert_ref(kernels: str, plan: Optional[str]):
    """ref(layer, e, x, gate, up, down): the expert's output the probe is compared with.

    vLLM's kernels: the exact computation (the probe's BF16 error is within
    EXPERT_TOL). kernels="mxrl": the engine's experts are mxrl's, so the
    reference is mxrl.ops' expert under the plan (the learner's bits: the probe
    equals it exactly when the expert is right).
    """
    if kernels != "mxrl":
        return lambda layer, e, x, g, u, d: _expert_out(x, g, u, d)
    ops = mxrl.ops

    def ref(layer: str, e: int, x: np.ndarray, g: np.ndarray, u: np.ndarray, d: np.ndarray) -> np.ndarray:
        li = int(layer.rsplit(".", 1)[-1])

        def lin(w, kind):
            prec = ops.plan_precision(plan, kind, li, e)
            return ops.Linear(np.ascontiguousarray(w, dtype=np.float32), precision=prec)

        x32 = np.ascontiguousarray(x, dtype=np.float32)
        return lin(d, "down").forward(ops.swiglu(lin(g, "gate").forward(x32), lin(u, "up").forward(x32)))

    return ref


def _check_experts(exp: Expected, prev: Optional[Expected], probes: Dict[str, Any],
                   f: Dict[str, List[str]], ref=None) -> set:
    """Findings of the expert probes (1-4); returns the expected names the probes cover."""
    covered = set()
    ref = ref or _expert_ref("vllm", None)
    for layer, rec in probes.items():
        def out(e, g, u, d, layer=layer):
            return ref(layer, e, rec["x"], g, u, d)

        def w(src, e, kind):
            t = src.tensors.get(f"{layer}.mlp.experts.{e}.{kind}_proj.weight") if src else None
            return None if t is None else t.values

        if "error" in rec:
            f["coverage"].append(f"{layer}.mlp.experts: the checker cannot probe the fused expert op ({rec['error']})")
            continue
        ys = rec["y"]
        E = ys.shape[0]
        for e in range(E):
            names = [f"{layer}.mlp.experts.{e}.{k}_proj.weight" for k in ("gate", "up", "down")]
            covered.update(names)
            g, u, d = w(exp, e, "gate"), w(exp, e, "up"), w(exp, e, "down")
            if g is None or u is None or d is None:
                continue
            err = _rel(ys[e], out(e, g, u, d))
            if err <= EXPERT_TOL:
                continue
            at = f"{layer}.mlp.experts.{e}"
            pg, pu, pd = w(prev, e, "gate"), w(prev, e, "up"), w(prev, e, "down")
            if pg is not None and _rel(ys[e], out(e, pg, pu, pd)) <= EXPERT_TOL:
                f["coverage"].append(f"{at}: still computes with the previous version's weights "
                                     "(not written by this sync)")
            elif _rel(ys[e], out(e, u, g, d)) <= EXPERT_TOL:
                f["placement"].append(f"{at}: computes with gate_proj and up_proj swapped")
            else:
                other = next((o for o in range(E) if o != e and w(exp, o, "gate") is not None and
                              _rel(ys[e], out(e, w(exp, o, "gate"), w(exp, o, "up"),
                                              w(exp, o, "down"))) <= EXPERT_TOL), None)
                if other is not None:
                    f["placement"].append(f"{at}: computes with the weights of expert {other}")
                else:
                    mx = exp.tensors[names[0]].mx
                    (f["grid"] if mx else f["exceptions"]).append(
                        f"{at}: the fused op's output differs from the learner's expert (relative error "
                        f"{err:.3g} on the probe, tolerance {EXPERT_TOL})")
    return covered


def check_freshness(engine: VllmEngine, version: int, v: Dict[str, Any], exp: Optional[Expected] = None) -> List[str]:
    f: List[str] = []
    for layer, rec in v["experts"].items():
        t = exp.tensors.get(f"{layer}.mlp.experts.0.gate_proj.weight") if exp else None
        if t is None or "w13" not in rec:
            continue
        up = exp.tensors[f"{layer}.mlp.experts.0.up_proj.weight"].values
        if np.array_equal(rec["w13"][0], np.concatenate([t.values, up]), equal_nan=True):
            f.append(f"packed {layer}.mlp.experts: the storage holds this version's values in checkpoint layout, "
                     "which the fused op reads as its CPU pre-pack: the pre-pack was not rebuilt")
    if engine.version != version:
        f.append(f"the sampler reports version {engine.version}, expected {version}")
    for name, g in v["live"].items():
        if g.codes is not None and g.scales is not None:
            want = np.asarray(mxrl.dequantize(g.codes, g.scales), dtype=np.float32)
            if not np.array_equal(want, g.values):
                f.append(f"packed {name}: the BF16 copy the kernel computes with does not re-derive from the "
                         "live codes and scales")
        elif g.source is not None and g.source.shape == g.values.shape and not np.array_equal(g.source, g.values):
            tied = " (tied to model.embed_tokens.weight)" if name == "lm_head.weight" else ""
            f.append(f"packed {name}: the GEMM copy does not re-pack from the live weights{tied}")
    cached = engine.cached_prefix_blocks()
    if engine.prefix_reset_version != version and cached:
        f.append(f"prefix cache: {cached} KV block(s) cached under an older version (last reset at version "
                 f"{engine.prefix_reset_version}), live version {version}")
    return f


# ------------------------------------------------------------------------------------------ 6
def check_atomicity(engine: VllmEngine, version: int, sync_failed: bool, served: Expected, v: Dict[str, Any],
                    rollout: List[dict], rollout_version: Optional[int]) -> List[str]:
    """The last rollout's versions; after a failed sync, `served` (the version before it) must be whole."""
    f: List[str] = []
    for s in rollout or []:
        if rollout_version is not None and s["version"] != rollout_version:
            f.append(f"sample {s['request']}.{s['index']}: generated under version {s['version']}, "
                     f"meant for {rollout_version}")
        for t, tv in enumerate(s.get("token_versions") or []):
            if tv != s["version"]:
                f.append(f"sample {s['request']}.{s['index']}: token [{t}] under version {tv}, the sample under "
                         f"{s['version']}")
                break
    if sync_failed and not engine.broken:
        live = v["live"]
        changed = [n for n, t in served.tensors.items() if ".mlp.experts." not in n and  # experts: the probe's
                   (n not in live or not np.array_equal(live[n].values, t.values, equal_nan=True))]
        if changed:
            f.append(f"a failed sync left {len(changed)} tensors changed from version {served.version}, which the "
                     f"sampler still reports: it serves a mix (first: {changed[0]})")
    return f


# ------------------------------------------------------------------------------------------ 7
def check_agreement(engine: VllmEngine, probe: dict, probe_logits: List[np.ndarray], bound: dict) -> Dict[str, Any]:
    T = float(probe.get("temperature", 1.0))
    rows = engine.prompt_logprobs(probe["tokens"], T)
    kl, dl, n = [], [], 0
    for seq, plen, lg, rs in zip(probe["tokens"], probe["prompt_len"], probe_logits, rows):
        z = np.asarray(lg, dtype=np.float64) / T
        z -= z.max(axis=1, keepdims=True)
        ll = z - np.log(np.exp(z).sum(axis=1, keepdims=True))  # learner log-probs, row t predicts t + 1
        for t in range(int(plen), len(seq)):
            ls = rs[t - 1].astype(np.float64)
            pl = ll[t - 1]
            ps = np.exp(ls)
            kl.append(float(np.sum(np.where(ps > 0, ps * (ls - pl), 0.0))))
            dl.append(abs(float(ls[seq[t]] - pl[seq[t]])))
            n += 1
    m = {"tokens": n, "kl_mean": float(np.mean(kl)) if kl else 0.0, "kl_max": float(np.max(kl)) if kl else 0.0,
         "abs_dlogp_mean": float(np.mean(dl)) if dl else 0.0, "abs_dlogp_max": float(np.max(dl)) if dl else 0.0,
         "bitwise": False}
    f = []
    if m["kl_mean"] > bound["max_kl"]:
        f.append(f"mean exact KL {m['kl_mean']:.3g} per token exceeds the bound {bound['max_kl']:.3g}")
    if m["abs_dlogp_max"] > bound["max_abs_dlogp"]:
        f.append(f"max |dlogp| {m['abs_dlogp_max']:.3g} exceeds the bound {bound['max_abs_dlogp']:.3g}")
    return {"findings": f, "measured": m}


# ------------------------------------------------------------------------------------------ all
def run(engine: VllmEngine, exp: Expected, prev: Optional[Expected], reference: dict, *, version: int,
        sync_failed: bool = False, rollout: Optional[List[dict]] = None,
        rollout_version: Optional[int] = None) -> List[Dict[str, Any]]:
    """The seven checks, in condition order, as mxrl.rl's remote sync reports them."""
    out = []
    t0 = time.perf_counter()
    v = view(engine)
    f = check_tensors(exp, prev, v)
    t_view = time.perf_counter() - t0
    for n in NAMES[:4]:
        out.append({"name": n, "ran": True, "passed": not f[n], "findings": f[n], "seconds": t_view / 4})
    t = time.perf_counter()
    fr = check_freshness(engine, version, v, exp)
    out.append({"name": "freshness", "ran": True, "passed": not fr, "findings": fr,
                "seconds": time.perf_counter() - t})
    t = time.perf_counter()
    at = check_atomicity(engine, version, sync_failed, exp, v, rollout or [], rollout_version)
    out.append({"name": "atomicity", "ran": True, "passed": not at, "findings": at,
                "seconds": time.perf_counter() - t})
    if reference.get("agreement") and not engine.broken:
        t = time.perf_counter()
        a = check_agreement(engine, reference["probe"], reference["probe_logits"], reference["bound"])
        out.append({"name": "agreement", "ran": True, "passed": not a["findings"], "findings": a["findings"],
                    "seconds": time.perf_counter() - t, "measured": a["measured"]})
    else:
        out.append({"name": "agreement", "ran": False, "passed": True, "findings": [], "seconds": 0.0})
    return out
