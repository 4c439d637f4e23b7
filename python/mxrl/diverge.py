"""The first divergence between mxrl's learner and an engine, per layer and op.

The same tokens go through the learner (``Model.load(dir, plan).trace(tokens,
step=0)``) and through an engine that captures the same activations by the
same names, in forward order::

    embed; layers.{l}.input_layernorm, .qkv_proj, .rotary_q, .rotary_k, .attn,
    .residual_mid, .post_attention_layernorm, (.gate_up_proj, .act | .router),
    .out; norm, logits, logprobs

``compare`` measures each capture point (max abs diff, relative L2
``||a-b|| / ||b||`` with the learner's values as ``b``, max ULP distance
between the float32 bit patterns, bitwise equality); ``first_divergence`` names
the first point that differs. ``to_markdown``, ``to_json`` and ``plot`` report
one or more engines.

Engines are found by name: the built-in ``mxrl`` (mxrl's own sampler, the
KV-cache decode path ``trace(step=1)``, which must agree with the learner bit
for bit) and every entry point of the group ``mxrl.engines`` (importlib
metadata), each a callable ``capture(model_dir, plan, tokens, **opts) -> dict``
of float32 arrays by capture name (names it cannot capture are left out and
reported as "not captured"). ``register`` adds one from Python.

Pure numpy; matplotlib only for ``plot``. The command line is
``python -m mxrl diverge`` (``main`` here).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np

ENTRY_POINT_GROUP = "mxrl.engines"

Capture = Callable[..., Dict[str, Any]]

_LAYER = re.compile(r"^layers\.(\d+)\.(.+)$")


# ---------------------------------------------------------------------------- metrics


def _ordered(bits: np.ndarray) -> np.ndarray:
    """float32 bit patterns (as int32) -> int64 keys whose order is the floats' order (-0 and +0 both 0)."""
    i = bits.astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def split_name(name: str):
    """'layers.3.qkv_proj' -> (3, 'qkv_proj'); 'logits' -> (None, 'logits')."""
    m = _LAYER.match(name)
    return (int(m.group(1)), m.group(2)) if m else (None, name)


def measure(a: Any, b: Any) -> Dict[str, Any]:
    """Metrics of engine values `a` against learner values `b` (both cast to float32, same shape).

    Positions where both are NaN, or both the same infinity, agree. Where only
    one is NaN (or the infinities differ) max_abs and max_ulp are inf and the
    count is in ``nan_mismatch``; rel_l2 is taken over the other positions
    (inf if there are none but mismatches).
    """
    a = np.ascontiguousarray(np.asarray(a, dtype=np.float32))
    b = np.ascontiguousarray(np.asarray(b, dtype=np.float32))
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {list(a.shape)} vs {list(b.shape)}")
    ab, bb = a.view(np.int32), b.view(np.int32)
    equal = bool(np.array_equal(ab, bb))
    an, bn = np.isnan(a), np.isnan(b)
    same = (a == b) | (an & bn)  # equal values (incl. +0/-0 and equal infinities) or both NaN
    bad = ~same & (an | bn | np.isinf(a) | np.isinf(b))  # one NaN, or an infinity against anything else
    ok = ~same & ~bad
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(a64 - b64)
    max_abs = float(d[ok].max()) if ok.any() else 0.0
    ulp = np.abs(_ordered(ab) - _ordered(bb))
    max_ulp = int(ulp[ok].max()) if ok.any() else 0
    # The typical element's distance (0 where equal): the max saturates near 2^31 as soon as a
    # value near 0 changes sign, the median still reads whether values differ by rounding or more.
    cmp = ok | (same & ~an)
    median_ulp = float(np.median(np.where(ok, ulp, 0)[cmp])) if cmp.any() else 0.0
    fin = ~an & ~bn & ~np.isinf(a) & ~np.isinf(b)
    num = float(np.sqrt(np.sum(np.where(ok, d, 0.0) ** 2)))
    den = float(np.sqrt(np.sum(np.where(fin, b64, 0.0) ** 2)))
    rel = 0.0 if num == 0 else (num / den if den > 0 else math.inf)
    n_bad = int(bad.sum())
    if n_bad:
        max_abs, max_ulp = math.inf, math.inf
        if num == 0 and den == 0:
            rel = math.inf
    return {"max_abs": max_abs, "rel_l2": rel, "max_ulp": max_ulp, "median_ulp": median_ulp, "equal": equal,
            "differing": int((~same).sum()), "nan_mismatch": n_bad}


def compare(learner: Mapping[str, Any], engine: Mapping[str, Any], order: Optional[Sequence[str]] = None) -> List[dict]:
    """One row per capture point, in `order` (default: the learner's keys, then the engine's extra ones).

    Each row: name, layer (int or None), op, shape, status ("equal", "differs",
    "not captured" by the engine, "not in learner", "shape mismatch"), equal
    (bitwise), max_abs, rel_l2, max_ulp, median_ulp (None where not measured),
    differing, nan_mismatch.
    """
    names = list(order) if order is not None else list(learner) + [k for k in engine if k not in learner]
    rows = []
    for name in names:
        layer, op = split_name(name)
        row: Dict[str, Any] = {"name": name, "layer": layer, "op": op, "shape": None, "status": "",
                               "equal": False, "max_abs": None, "rel_l2": None, "max_ulp": None,
                               "median_ulp": None, "differing": None, "nan_mismatch": None}
        if name not in learner:
            row["status"] = "not in learner"
            if name in engine:
                row["shape"] = list(np.shape(engine[name]))
        elif name not in engine:
            row["status"] = "not captured"
            row["shape"] = list(np.shape(learner[name]))
        else:
            row["shape"] = list(np.shape(learner[name]))
            if tuple(np.shape(engine[name])) != tuple(row["shape"]):
                row["status"] = "shape mismatch"
                row["engine_shape"] = list(np.shape(engine[name]))
            else:
                row.update(measure(engine[name], learner[name]))
                row["status"] = "equal" if row["equal"] else "differs"
        rows.append(row)
    return rows


def first_divergence(rows: Iterable[dict]) -> Optional[dict]:
    """The first row (forward order) that differs or whose shape does not match; None if none does."""
    for r in rows:
        if r["status"] in ("differs", "shape mismatch"):
            return r
    return None


# ---------------------------------------------------------------------------- reports


def _fmt(v: Any, kind: str) -> str:
    if v is None:
        return "-"
    if kind == "ulp":
        return "inf" if v == math.inf else str(int(v))
    if v == 0:
        return "0"
    if v == math.inf:
        return "inf"
    return f"{v:.3g}"


def _growth(r: dict, prev: Optional[float]) -> str:
    x = r.get("rel_l2")
    if x is None or prev is None or prev == 0 or x == math.inf or prev == math.inf:
        return ""
    return f"x{x / prev:.2g}"


def to_markdown(rows: Sequence[dict], title: str = "") -> str:
    """A markdown table of `rows`, first divergence named above it; growth: rel_l2 over the previous `out`."""
    fd = first_divergence(rows)
    lines = []
    if title:
        lines += [title, ""]
    if fd is None:
        missing = [r["name"] for r in rows if r["status"] != "equal"]
        lines.append("No divergence: every captured point is bitwise equal"
                     + (f" ({len(missing)} not compared)." if missing else "."))
    else:
        lines.append(f"First divergence: **{fd['name']}** (layer {fd['layer'] if fd['layer'] is not None else '-'}, "
                     f"op {fd['op']}): {fd['status']}, max abs {_fmt(fd['max_abs'], 'f')}, rel L2 "
                     f"{_fmt(fd['rel_l2'], 'f')}, max ULP {_fmt(fd['max_ulp'], 'ulp')}.")
    lines += ["", "| point | layer | op | shape | status | max abs | rel L2 | max ULP | median ULP | growth |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    prev_out = None
    for r in rows:
        growth = ""
        if r["op"] in ("out", "embed"):
            growth = _growth(r, prev_out)
            prev_out = r.get("rel_l2")
        mark = " **<- first**" if fd is not None and r is fd else ""
        lines.append(f"| {r['name']}{mark} | {'' if r['layer'] is None else r['layer']} | {r['op']} | "
                     f"{'x'.join(map(str, r['shape'])) if r['shape'] else '-'} | {r['status']} | "
                     f"{_fmt(r['max_abs'], 'f')} | {_fmt(r['rel_l2'], 'f')} | {_fmt(r['max_ulp'], 'ulp')} | "
                     f"{_fmt(r.get('median_ulp'), 'f')} | {growth} |")
    return "\n".join(lines) + "\n"


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "inf" if v > 0 else ("-inf" if v < 0 else "nan")
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.generic):
        return _jsonable(v.item())
    return v


def to_json(results: Any, **meta: Any) -> str:
    """JSON of rows (a list) or of {engine: rows}; each engine with its first divergence; infinities as strings."""
    if isinstance(results, list):
        results = {"engine": results}
    doc = dict(meta)
    doc["engines"] = {}
    for name, rows in results.items():
        if isinstance(rows, dict):  # an engine that failed: {"error": ...}
            doc["engines"][name] = rows
            continue
        fd = first_divergence(rows)
        doc["engines"][name] = {"first_divergence": None if fd is None else fd["name"], "rows": rows}
    return json.dumps(_jsonable(doc), indent=1) + "\n"


def plot(results_by_engine: Mapping[str, Sequence[dict]], path: str, title: str = "") -> None:
    """Log-scale rel L2 per capture point in forward order, one line per engine, written to `path` (PNG).

    Exact points (rel L2 0) are drawn at the bottom of the axis. Raises
    RuntimeError (one line) when matplotlib cannot be imported.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001 - any import failure means no plot
        raise RuntimeError(f"plot skipped: matplotlib is not importable ({e.__class__.__name__}: {e})") from None
    engines = {k: v for k, v in results_by_engine.items() if isinstance(v, list)}
    names: List[str] = []
    for rows in engines.values():
        for r in rows:
            if r["name"] not in names:
                names.append(r["name"])
    pos = {n: i for i, n in enumerate(names)}
    vals = [r["rel_l2"] for rows in engines.values() for r in rows
            if isinstance(r.get("rel_l2"), float) and 0 < r["rel_l2"] < math.inf]
    floor = min(vals) / 10 if vals else 1e-12
    fig, ax = plt.subplots(figsize=(max(8.0, 0.22 * len(names)), 4.8))
    for eng, rows in engines.items():
        xs, ys = [], []
        for r in rows:
            v = r.get("rel_l2")
            if v is None:
                continue
            xs.append(pos[r["name"]])
            ys.append(floor if v == 0 else (v if v < math.inf else (max(vals) * 10 if vals else 1.0)))
        fd = first_divergence(rows)
        ax.plot(xs, ys, marker=".", label=eng + (f" (first: {fd['name']})" if fd else " (bitwise equal)"))
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=90, fontsize=6)
    ax.set_ylabel(f"rel L2 vs learner (0 drawn at {floor:.1g})")
    ax.set_title(title or "first divergence: rel L2 per capture point")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------- engines


def _mxrl_capture(model_dir: str, plan: str, tokens: Sequence[int], **opts: Any) -> Dict[str, Any]:
    """mxrl's own sampler: the tokens fed one at a time through the KV cache (trace step=1)."""
    if opts:
        raise ValueError(f"engine mxrl takes no options (got {', '.join(sorted(opts))})")
    from . import Model

    return _trace(Model.load(str(model_dir), plan), tokens, 1)


_REGISTERED: Dict[str, Capture] = {"mxrl": _mxrl_capture}


def register(name: str, capture: Capture) -> None:
    """Add an engine by name (overrides an entry point of the same name)."""
    _REGISTERED[name] = capture


def engines() -> Dict[str, Any]:
    """Engine name -> capture callable (registered) or entry point (loaded on use)."""
    from importlib.metadata import entry_points

    found: Dict[str, Any] = {}
    try:
        eps = entry_points(group=ENTRY_POINT_GROUP)
    except TypeError:  # Python < 3.10
        eps = entry_points().get(ENTRY_POINT_GROUP, [])
    for ep in eps:
        found.setdefault(ep.name, ep)
    found.update(_REGISTERED)
    return found


def get_engine(name: str) -> Capture:
    known = engines()
    if name not in known:
        raise ValueError(f"--engine {name}: unknown engine (known: {', '.join(sorted(known)) or 'none'}; others "
                         f"register through the entry-point group {ENTRY_POINT_GROUP})")
    e = known[name]
    if callable(e) and not hasattr(e, "load"):
        return e
    try:
        return e.load()
    except Exception as err:  # noqa: BLE001 - an engine whose package cannot load
        raise ValueError(f"--engine {name}: cannot load {e.value}: {err.__class__.__name__}: {err}") from None


def _trace(model: Any, tokens: Sequence[int], step: int) -> Dict[str, np.ndarray]:
    if not hasattr(model, "trace"):
        raise ValueError("this mxrl build has no Model.trace (per-layer activation capture)")
    return {k: np.asarray(v, dtype=np.float32) for k, v in model.trace(list(tokens), step=step).items()}


def learner_trace(model_dir: str, plan: str, tokens: Sequence[int]) -> Dict[str, np.ndarray]:
    """The learner's captures: one forward pass of all tokens (trace step=0)."""
    from . import Model

    return _trace(Model.load(str(model_dir), plan), tokens, 0)


def run(model_dir: str, plan: str, engine_names: Sequence[str], tokens: Sequence[int],
        opts: Optional[Mapping[str, Mapping[str, Any]]] = None, log=None) -> Dict[str, Any]:
    """Learner vs each engine on `tokens`: {engine: rows}; an engine that fails gives {"error": message}.

    opts: per-engine keyword options for its capture.
    """
    captures = [(n, get_engine(n)) for n in engine_names]  # unknown names fail before any work
    learner = learner_trace(model_dir, plan, tokens)
    res: Dict[str, Any] = {}
    for name, cap in captures:
        if log:
            print(f"diverge: capturing {name}", file=log)
        try:
            got = cap(str(model_dir), plan, list(tokens), **dict((opts or {}).get(name, {})))
        except Exception as e:  # noqa: BLE001 - one engine failing does not lose the others' reports
            res[name] = {"error": f"{e.__class__.__name__}: {e}"}
            continue
        res[name] = compare(learner, got)
    return res


def vocab_size(model_dir: str) -> int:
    path = Path(model_dir) / "config.json"
    try:
        return int(json.loads(path.read_text())["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: cannot read vocab_size ({e.__class__.__name__}: {e})") from None


def make_tokens(model_dir: str, tokens: Optional[str] = None, prompt_len: int = 32, seed: int = 0) -> List[int]:
    """`tokens` parsed ("1,2,3", each in the vocabulary) or `prompt_len` random in-vocabulary ids from `seed`."""
    vocab = vocab_size(model_dir)
    if tokens:
        try:
            ids = [int(t) for t in tokens.split(",") if t.strip()]
        except ValueError:
            raise ValueError(f"--tokens {tokens}: expected comma-separated token ids") from None
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"--tokens: {bad[0]} is outside the vocabulary [0, {vocab})")
        if len(ids) < 2:
            raise ValueError("--tokens: at least 2 tokens")
        return ids
    if prompt_len < 2:
        raise ValueError(f"--prompt-len {prompt_len}: at least 2")
    return [int(t) for t in np.random.default_rng(seed).integers(0, vocab, prompt_len)]


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


_MODE = 0o666 & ~_umask()


def stamp() -> str:
    """When and where a comparison ran: today's date, mxrl's version, this CPU and its core count."""
    import datetime

    from . import __version__

    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{datetime.date.today().isoformat()}, mxrl {__version__}, {cpu}, {os.cpu_count()} cores"


def _write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=f".{path.name}.")
    os.fchmod(fd, _MODE)  # mkstemp makes it 0600; a report is as readable as any file written here
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_reports(out: str, results: Mapping[str, Any], meta: Mapping[str, Any]) -> List[str]:
    """OUT/diverge.json, .md, .png (each written to a temp file, then renamed); returns notes (a skipped plot)."""
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    notes = []
    _write(d / "diverge.json", to_json(dict(results), **meta).encode())
    head = (f"## First divergence: {meta.get('model', '')} under plan {meta.get('plan', '')}, "
            f"{len(meta.get('tokens', []))} tokens")
    parts = [head, "", f"Measured {meta['stamp']}.", ""] if meta.get("stamp") else [head, ""]
    for name, rows in results.items():
        if isinstance(rows, dict):
            parts += [f"### {name}", "", f"Engine failed: {rows['error']}", ""]
        else:
            parts.append(to_markdown(rows, f"### {name}"))
    _write(d / "diverge.md", "\n".join(parts).encode())
    png = d / "diverge.png"
    fd, tmp = tempfile.mkstemp(dir=str(d), prefix=".diverge.png.", suffix=".png")
    os.fchmod(fd, _MODE)
    os.close(fd)
    try:
        plot(results, tmp, title=head.lstrip("# "))
        os.replace(tmp, png)
    except RuntimeError as e:
        notes.append(str(e))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return notes


# ---------------------------------------------------------------------------- command line


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="the learner's checkpoint directory")
    p.add_argument("--plan", default="mxfp8", help="the learner's precision plan (default mxfp8)")
    p.add_argument("--engine", action="append", default=[], metavar="NAME",
                   help="an engine to compare (repeatable; default mxrl): mxrl, or one registered under the "
                        f"entry-point group {ENTRY_POINT_GROUP}")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--tokens", help="comma-separated token ids")
    g.add_argument("--prompt-len", type=int, default=None, help="this many random in-vocabulary tokens (default 32)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random tokens")
    p.add_argument("--opt", action="append", default=[], metavar="ENGINE:KEY=VALUE",
                   help="an option for an engine's capture (repeatable; VALUE as JSON, else a string)")
    p.add_argument("--out", required=True, help="output directory (diverge.json, diverge.md, diverge.png)")
    p.add_argument("--stamp", default="", help="the date/commit/CPU line of the report (default: today, mxrl's "
                   "version, this CPU)")


def parse_opts(items: Sequence[str]) -> Dict[str, Dict[str, Any]]:
    opts: Dict[str, Dict[str, Any]] = {}
    for it in items:
        eng, colon, kv = it.partition(":")
        key, eq, val = kv.partition("=")
        if not colon or not eq or not eng or not key:
            raise ValueError(f"--opt {it}: expected ENGINE:KEY=VALUE")
        try:
            v = json.loads(val)
        except json.JSONDecodeError:
            v = val
        opts.setdefault(eng, {})[key.replace("-", "_")] = v
    return opts


def execute(a: argparse.Namespace, log=None) -> int:
    """Runs a parsed `diverge` command line; returns the exit status (1: some engine failed)."""
    log = log or sys.stderr
    if not Path(a.checkpoint, "config.json").is_file():
        raise ValueError(f"{a.checkpoint}: not a checkpoint directory (no config.json)")
    names = a.engine or ["mxrl"]
    opts = parse_opts(a.opt)
    for e in opts:
        if e not in names:
            raise ValueError(f"--opt {e}:...: engine {e} is not among --engine {', '.join(names)}")
    tokens = make_tokens(a.checkpoint, a.tokens, 32 if a.prompt_len is None else a.prompt_len, a.seed)
    res = run(a.checkpoint, a.plan, names, tokens, opts, log=log)
    meta = {"model": str(a.checkpoint), "plan": a.plan, "tokens": tokens, "stamp": a.stamp or stamp()}
    notes = write_reports(a.out, res, meta)
    for n in notes:
        print(f"diverge: {n}", file=log)
    for name, rows in res.items():
        if isinstance(rows, dict):
            print(f"diverge: {name}: failed: {rows['error']}", file=log)
            continue
        fd = first_divergence(rows)
        print(f"diverge: {name}: " + ("bitwise equal at every captured point" if fd is None else
                                      f"first divergence at {fd['name']} (rel L2 {_fmt(fd['rel_l2'], 'f')}, "
                                      f"max ULP {_fmt(fd['max_ulp'], 'ulp')})"), file=log)
    print(f"diverge: wrote {a.out}/diverge.json, diverge.md" + ("" if notes else ", diverge.png"), file=log)
    return 1 if any(isinstance(r, dict) for r in res.values()) else 0


def main(argv: Optional[Sequence[str]] = None, prog: str = "python -m mxrl diverge") -> int:
    p = argparse.ArgumentParser(prog=prog, description="Where an engine's forward pass first differs from mxrl's "
                                "learner: per layer and op, max abs diff, rel L2, max ULP (table, JSON, plot)")
    add_arguments(p)
    a = p.parse_args(argv)
    try:
        return execute(a)
    except ValueError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
