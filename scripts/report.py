#!/usr/bin/python3
"""Turn the JSON written by `mxrl report --out DIR` into DIR/README.md and PNG plots.

Usage: /usr/bin/python3 scripts/report.py DIR

Reads DIR/matching.json, DIR/rl_kl.json, DIR/speed.json (and the Chrome trace files its "traces" name),
DIR/faults/faults.{json,md} and the optional DIR/report.json. A missing file makes its section say "not run".
Every number in the README comes from these files. Malformed input: exit 1 with one line on stderr.
"""
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FixedFormatter, FixedLocator, FuncFormatter, MaxNLocator, NullFormatter  # noqa: E402

PRESET_ORDER = ["dense", "moe"]
KERNEL_STYLE = {"shared": ("o", "tab:blue"), "foreign": ("s", "tab:orange")}
# Phases of a traced training step, in table order; "step" is the whole step on the main thread.
PHASES = ["weight_quant", "act_quant", "gemm", "attention", "optimizer", "alloc"]
PHASE_COLORS = {"weight_quant": "tab:purple", "act_quant": "tab:orange", "gemm": "tab:blue",
                "attention": "tab:green", "optimizer": "tab:red", "alloc": "tab:brown"}
EXTRA_COLORS = ["tab:pink", "tab:olive", "tab:cyan", "tab:gray"]  # phases the script does not know yet


class ReportError(Exception):
    pass


# ---------------------------------------------------------------- schema checking

NUM, NUM_OR_NULL, STR, BOOL, INT = "number", "number or null", "string", "bool", "integer"


class Opt:  # an optional key: checked only when present
    def __init__(self, schema):
        self.schema = schema


class Each:  # an object with any keys, each value checked against one schema
    def __init__(self, schema):
        self.schema = schema


def _is(value, kind):
    if kind == BOOL:
        return isinstance(value, bool)
    if kind == STR:
        return isinstance(value, str)
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    num = isinstance(value, (int, float)) and not isinstance(value, bool)
    return num or (kind == NUM_OR_NULL and value is None)


def check(value, schema, where):
    """Check value against schema (a kind, [item], {key: schema} or Each); raise on the first problem."""
    name = where or "top level"
    if isinstance(schema, (dict, Each)) and not isinstance(value, dict):
        raise ReportError(f"{name} is not an object")
    if isinstance(schema, Each):
        for key, item in value.items():
            check(item, schema.schema, f"{where}.{key}")
    elif isinstance(schema, dict):
        for key, sub in schema.items():
            if key in value:
                check(value[key], sub.schema if isinstance(sub, Opt) else sub, f"{where}.{key}" if where else key)
            elif not isinstance(sub, Opt):
                raise ReportError(f'{name} has no "{key}"')
    elif isinstance(schema, list):
        if not isinstance(value, list):
            raise ReportError(f"{name} is not a list")
        for i, item in enumerate(value):
            check(item, schema[0], f"{where}[{i}]")
    elif not _is(value, schema):
        article = "an" if schema[0] in "aeiou" else "a"
        raise ReportError(f"{name} is {json.dumps(value)[:40]}, expected {article} {schema}")


CI = [NUM_OR_NULL]
MATCHING = {
    "config": {"task": STR, "probe_prompts": INT, "samples_per_prompt": INT, "temperature": NUM,
               "bootstrap": INT, "foreign_split_k": INT, "date": Opt(STR), "threads": Opt(INT), "seconds": Opt(NUM)},
    "presets": Opt(Each({"model": STR, "sft_steps": NUM_OR_NULL, "accuracy": NUM_OR_NULL})),  # null: model given
    "rows": [{"preset": STR, "kernels": STR, "label": STR, "tokens": INT, "kl_mean": NUM_OR_NULL, "kl_ci": CI,
              "k3": NUM_OR_NULL, "abs_dlogp_mean": NUM_OR_NULL, "abs_dlogp_max": NUM, "bitwise_equal": BOOL}],
    "paper": [{"claim": STR, "paper": STR, "preset": STR, "kernels": STR, "numerator": STR, "denominator": STR,
               "ratio": NUM_OR_NULL, "ratio_ci": CI,
               "change_pct": NUM_OR_NULL}],
}
TIME = {"generate_s": NUM, "score_s": NUM, "train_s": NUM, "sync_s": NUM, "checks_s": NUM, "step_s": NUM}
RL_KL = {
    "config": {"task": STR, "steps": INT, "prompts_per_step": INT, "samples_per_prompt": INT, "lr": NUM,
               "seeds": [INT]},
    "runs": [{"preset": STR, "config": STR, "seed": INT, "kl_mean": [NUM], "reward": [NUM],
              "abs_dlogp_max": [NUM], "time": TIME}],
}
SPEED = {
    "sweep": {"preset": STR, "tokens": INT, "seq_len": INT, "threads": INT,
              "results": [{"recipe": STR, "budget": INT, "microbatch_tokens": NUM, "microbatch_s": NUM,
                           "tokens_per_s": NUM, "ratio_to_first": NUM}],
              "fits": Opt(Each({"fixed_per_microbatch_s": NUM, "per_token_s": NUM, "r2": NUM_OR_NULL})),
              "crossover": Opt(Each({"vs": STR, "tokens": Opt(NUM_OR_NULL), "verdict": STR, "measured": STR}))},
    "rl_split": [dict({"preset": STR, "recipe": STR, "sampler": STR, "steps": INT}, **TIME)],
    "paper": [{"what": STR, "paper": STR, "preset": STR, "bf16_s": Opt(NUM), "mxfp8_s": Opt(NUM),
               "mxrl_change_pct": NUM_OR_NULL}],
    "traces": Opt([{"recipe": STR, "file": STR, "preset": STR, "tokens": INT,
                    "phases": Each(Each(NUM))}]),  # phases[name][tid]: summed seconds; tid "0" is the main thread
}
TRACE = {"traceEvents": [{"ph": STR}]}
TRACE_EVENT = {"X": {"name": STR, "tid": INT, "ts": NUM, "dur": NUM}, "M": {"name": STR, "tid": INT}}
TRACE_NAME = {"args": {"name": STR}}  # "M" events named thread_name / process_name
FAULTS = {"rows": [{"preset": STR, "fault": STR, "applicable": BOOL}]}
FAULT_APPLICABLE = {"first_opportunity": BOOL, "silent_without_checks": BOOL, "fired": Each(INT), "missed": [STR]}
REPORT = {"parts": Opt(Each({"mode": STR, "date": STR, "seconds": NUM})), "seconds": Opt(NUM), "date": Opt(STR),
          "threads": Opt(INT), "machine": Opt(STR)}


def load(path, schema, extra=None):
    """Parsed and checked JSON (extra(data) checks what a schema can't), or None when the file is missing."""
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        check(data, schema, "")
        if extra:
            extra(data)
        return data
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ReportError(f"{path}: invalid JSON: {e}") from None
    except OSError as e:
        raise ReportError(f"{path}: cannot read: {e.strerror}") from None
    except ReportError as e:
        raise ReportError(f"{path}: {e}") from None


def read_text(path):
    """The file's text, or None when it is missing."""
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ReportError(f"{path}: cannot read: {e}") from None


def check_faults(data):
    for i, row in enumerate(data["rows"]):
        if row["applicable"]:
            check(row, FAULT_APPLICABLE, f"rows[{i}]")


def check_speed(data):
    for i, t in enumerate(data.get("traces", [])):
        where = f"traces[{i}]"
        if not t["file"] or t["file"] != os.path.basename(t["file"]) or t["file"] in (".", ".."):
            raise ReportError(f"{where}.file is {json.dumps(t['file'])[:40]}, expected a file name in the directory")
        for name, by_tid in t["phases"].items():
            for tid in by_tid:
                if not tid.isdigit():
                    raise ReportError(f"{where}.phases.{name} has thread {json.dumps(tid)[:40]}, expected a number")
        check(t["phases"], {"step": {"0": NUM}}, f"{where}.phases")


def check_trace(data):
    for i, ev in enumerate(data["traceEvents"]):
        check(ev, TRACE_EVENT.get(ev["ph"], {}), f"traceEvents[{i}]")
        if ev["ph"] == "M" and ev["name"] in ("thread_name", "process_name"):
            check(ev, TRACE_NAME, f"traceEvents[{i}]")


def load_traces(out, sp):
    """[(trace entry of speed.json, its trace file's data)], checked before anything is written."""
    traces = []
    for i, t in enumerate((sp or {}).get("traces", [])):
        path = os.path.join(out, t["file"])
        data = load(path, TRACE, check_trace)
        if data is None:
            raise ReportError(f"{path}: missing (speed.json traces[{i}].file)")
        traces.append((t, data))
    return traces


def check_rl_kl(data):
    steps = data["config"]["steps"]
    for i, run in enumerate(data["runs"]):
        for key in ("kl_mean", "reward", "abs_dlogp_max"):
            if len(run[key]) != steps:
                raise ReportError(f"runs[{i}].{key} has {len(run[key])} values, config.steps is {steps}")


# ---------------------------------------------------------------- formatting

def fmt_kl(x, bitwise=False):
    if x is None:
        return "n/a"
    if x == 0:
        return "0 (bitwise)" if bitwise else "0"
    return f"{x:.1e}"


def fmt_ci(ci, fmt=fmt_kl):
    return f"[{fmt(ci[0])}, {fmt(ci[1])}]" if len(ci) == 2 else ""


def fmt_ratio(r):
    if r is None:
        return "n/a"
    if r == 0:
        return "0x"
    return f"{r:.1e}x" if r < 0.01 or r >= 1000 else (f"{r:.2f}x" if r < 10 else f"{r:.0f}x")


def fmt_pct(p, digits=0):
    return "n/a" if p is None else f"{p:+.{digits}f}%"


def fmt_g(x, digits=3):
    return "n/a" if x is None else f"{x:.{digits}g}"


def fmt_ms(s):
    return f"{s * 1e3:.3g}"


def fmt_duration(s):
    return f"{s:.0f} s" if s < 120 else (f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h")


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def unique(values):
    return list(dict.fromkeys(values))


def presets_of(items):
    """Presets in items: dense, moe first, then any others."""
    order = {p: i for i, p in enumerate(PRESET_ORDER)}
    return sorted(unique(it["preset"] for it in items), key=lambda p: (order.get(p, len(order)), p))


def write_atomic(path, text):
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def save_fig(fig, out, name):
    path = os.path.join(out, name)
    fig.savefig(path + ".tmp", format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    os.replace(path + ".tmp", path)
    return f"![{name[:-4]}]({name})"


def drop_stale(out, *names):
    """A section that did not run must not leave an old run's plot looking current."""
    for name in names:
        if os.path.exists(os.path.join(out, name)):
            os.remove(os.path.join(out, name))


# ---------------------------------------------------------------- 1. matching

def matching_section(m, rl, out):
    parts = ["## 1. What matching buys"]
    if m is None:
        drop_stale(out, "matching_kl.png")
        parts.append("Not run (no `matching.json`).")
    else:
        c = m["config"]
        parts.append(f"Exact KL(sampler || learner) per token on `{c['task']}`: {c['probe_prompts']} probe prompts x "
                     f"{c['samples_per_prompt']} samples at temperature {c['temperature']:g}, 95% CIs from "
                     f"{c['bootstrap']} bootstrap resamples over prompts. \"foreign\" kernels: the sampler's GEMMs "
                     f"use split-K {c['foreign_split_k']}; \"shared\": the learner's kernels.")
        warm = [f"{name}: `{w['model']}` (given)" if w["sft_steps"] is None or w["accuracy"] is None else
                f"{name}: {w['sft_steps']:.0f} SFT steps, held-out greedy accuracy {w['accuracy']:.0%}"
                for name, w in m.get("presets", {}).items()]
        if warm:
            parts.append("Warm starts: " + "; ".join(warm) + ".")
        parts.append(table(["claim", "KL of / KL of", "preset", "kernels", "paper", "mxrl: ratio [95% CI], change"],
                           [[p["claim"], f"{p['numerator']} / {p['denominator']}", p["preset"], p["kernels"], p["paper"],
                             paper_ratio(p)] for p in m["paper"]]))
        for preset in presets_of(m["rows"]):
            parts.append(f"### {preset}\n\n" + matching_table([r for r in m["rows"] if r["preset"] == preset]))
        if m["rows"]:
            parts.append(save_fig(plot_matching(m["rows"]), out, "matching_kl.png"))
    parts.append(rl_kl_section(rl, out))
    return "\n\n".join(parts)


def paper_ratio(p):
    if p["ratio"] is None:
        return "n/a (denominator KL is 0)"
    if p["ratio"] == 0:
        return "0x (numerator KL is 0), -100%"
    text = f"{fmt_ratio(p['ratio'])} {fmt_ci(p['ratio_ci'], fmt_ratio)}"
    change = p["change_pct"]
    return text + (f", {fmt_pct(change)}" if change is not None and abs(change) < 1000 else "")


def kl_with_ci(r):
    if r is None:
        return "—"
    if not r["kl_mean"]:  # 0 or null: a CI adds nothing
        return fmt_kl(r["kl_mean"], r["bitwise_equal"])
    return f"{fmt_kl(r['kl_mean'])} {fmt_ci(r['kl_ci'])}"


def matching_table(rows):
    by = {(r["label"], r["kernels"]): r for r in rows}
    body = []
    for label in unique(r["label"] for r in rows):
        s, f = by.get((label, "shared")), by.get((label, "foreign"))
        shared = ["—"] * 4 if s is None else [
            fmt_kl(s["k3"], s["bitwise_equal"]), fmt_g(s["abs_dlogp_mean"], 2), fmt_g(s["abs_dlogp_max"], 2),
            s["tokens"]]
        body.append([label, kl_with_ci(s)] + shared + [kl_with_ci(f)])
    return table(["config", "KL [95% CI]", "k3", r"mean \|dlogp\|", r"max \|dlogp\|", "tokens",
                  "KL, foreign kernels [95% CI]"], body)


def plot_matching(rows):
    presets = presets_of(rows)
    labels = unique(r["label"] for r in rows)
    positive = [v for r in rows for v in [r["kl_mean"]] + r["kl_ci"] if v is not None and v > 0]
    lo = 10 ** math.floor(math.log10(min(positive))) if positive else 1e-6
    hi = 10 ** math.ceil(math.log10(max(positive))) if positive else 1.0
    zero_x, left = lo / 10, lo / 40
    fig, axes = plt.subplots(1, len(presets), figsize=(6.2 * len(presets), 0.42 * len(labels) + 1.6),
                             sharey=True, squeeze=False)
    for ax, preset in zip(axes[0], presets):
        ax.axvspan(left, lo / 3, color="0.93", zorder=0)
        for kernels, dy in (("shared", -0.17), ("foreign", 0.17)):
            marker, color = KERNEL_STYLE[kernels]
            sel = [r for r in rows if r["preset"] == preset and r["kernels"] == kernels and r["kl_mean"] is not None]
            for r in sel:
                y = labels.index(r["label"]) + dy
                if r["kl_mean"] == 0:
                    ax.plot(zero_x, y, marker="<", color=color, ms=7, mfc="white")
                    ax.annotate("0 (bitwise)" if r["bitwise_equal"] else "0", (zero_x, y), xytext=(7, 0),
                                textcoords="offset points", va="center", fontsize=7, color=color)
                    continue
                kl, ci = r["kl_mean"], r["kl_ci"]
                ci = ci if len(ci) == 2 and None not in ci else [kl, kl]
                err = [[max(0, kl - max(ci[0], left))], [max(0, ci[1] - kl)]]
                ax.errorbar(kl, y, xerr=err, fmt=marker, color=color, ms=5, capsize=2, lw=1)
        ax.set_xscale("log")
        ax.set_xlim(left, hi)
        decades = [10.0 ** k for k in range(round(math.log10(lo)), round(math.log10(hi)) + 1)]
        ax.xaxis.set_major_locator(FixedLocator([zero_x] + decades))
        every = math.ceil(len(decades) / 7)  # at most ~7 labelled decades, counted down from the top
        names = [f"1e{round(math.log10(d))}" if (len(decades) - 1 - i) % every == 0 else ""
                 for i, d in enumerate(decades)]
        ax.xaxis.set_major_formatter(FixedFormatter(["0"] + names))
        ax.xaxis.set_minor_locator(FixedLocator([d * k for d in decades[:-1] for k in range(2, 10)]))
        ax.set_title(preset)
        ax.set_xlabel("mean exact KL per token (log scale; grey band: exactly 0)")
        ax.grid(axis="x", which="major", alpha=0.3)
        for y in range(len(labels) - 1):
            ax.axhline(y + 0.5, color="0.9", lw=0.6)
    axes[0][0].set_yticks(range(len(labels)), labels)
    axes[0][0].set_ylim(len(labels) - 0.5, -0.5)
    handles = [plt.Line2D([], [], marker=KERNEL_STYLE[k][0], color=KERNEL_STYLE[k][1], ls="", label=f"{k} kernels")
               for k in ("shared", "foreign")]
    fig.legend(handles=handles, loc="lower center", ncol=2, bbox_to_anchor=(0.5, -0.02), frameon=False)
    fig.suptitle("KL(sampler || learner) at the probe, mean with 95% CI")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


# ---------------------------------------------------------------- KL during RL

def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def rl_groups(rl):
    """(preset, config) -> list of runs (one per seed), in file order."""
    groups = {}
    for run in rl["runs"]:
        groups.setdefault((run["preset"], run["config"]), []).append(run)
    return groups


def rl_kl_section(rl, out):
    if rl is None:
        drop_stale(out, "rl_kl.png")
        return "### KL during RL\n\nNot run (no `rl_kl.json`)."
    c = rl["config"]
    last = min(10, c["steps"])
    body = []
    for (preset, config), runs in rl_groups(rl).items():
        per_seed = [mean(r["kl_mean"]) for r in runs]
        body.append([preset, config, len(runs), fmt_kl(mean(per_seed)),
                     f"{fmt_kl(min(per_seed))}..{fmt_kl(max(per_seed))}",
                     fmt_g(max(max(r["abs_dlogp_max"], default=0) for r in runs), 2),
                     f"{mean([mean(r['reward'][-last:]) for r in runs]):.3f}",
                     f"{mean([r['time']['step_s'] for r in runs]):.3g}"])
    text = (f"### KL during RL\n\nGRPO on `{c['task']}`, {c['steps']} steps of {c['prompts_per_step']} prompts x "
            f"{c['samples_per_prompt']} samples, lr {c['lr']:g}, seeds {', '.join(str(s) for s in c['seeds'])}. "
            "KL: mean exact KL(rollout || learner) per token over the steps, averaged over seeds "
            "(min..max: the per-seed means).\n\n"
            + table(["preset", "config", "seeds", "mean KL", "min..max over seeds", r"max \|dlogp\|",
                     f"reward, last {last} steps", "step (s)"], body))
    if rl["runs"]:
        text += "\n\n" + save_fig(plot_rl_kl(rl), out, "rl_kl.png")
    return text


def plot_rl_kl(rl):
    groups = rl_groups(rl)
    presets = presets_of(rl["runs"])
    configs = unique(cfg for _, cfg in groups)
    colors = {cfg: f"C{i}" for i, cfg in enumerate(configs)}
    positive = [v for r in rl["runs"] for v in r["kl_mean"] if v > 0]
    linthresh = 10 ** math.floor(math.log10(min(positive))) / 10 if positive else 1e-6
    fig, axes = plt.subplots(2, len(presets), figsize=(6 * len(presets), 7), sharex=True, squeeze=False)
    for col, preset in enumerate(presets):
        for row, key in enumerate(("kl_mean", "reward")):
            ax = axes[row][col]
            for cfg in configs:
                runs = groups.get((preset, cfg))
                if not runs:
                    continue
                n = min(len(r[key]) for r in runs)
                series = [[r[key][i] for r in runs] for i in range(n)]
                steps = range(1, n + 1)
                ax.plot(steps, [mean(s) for s in series], color=colors[cfg], lw=1.4)
                ax.fill_between(steps, [min(s) for s in series], [max(s) for s in series], color=colors[cfg],
                                alpha=0.18, lw=0)
            if key == "kl_mean":
                ax.set_yscale("symlog", linthresh=linthresh, linscale=0.5)
                ax.set_ylim(bottom=-linthresh / 2)
                # 0, then the decades above the linear range (the threshold's own tick would sit on 0's).
                top = ax.get_ylim()[1]
                decades = [linthresh * 10 ** k for k in range(1, 30) if linthresh * 10 ** k <= top]
                ax.set_yticks([0.0] + decades)
                ax.set_yticks([], minor=True)
                ax.set_title(preset)
                ax.set_ylabel(f"KL per token (symlog, linear below {linthresh:.0e})")
            else:
                ax.set_ylabel("mean reward")
                ax.set_xlabel("RL step")
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color=colors[c], lw=2, label=c) for c in configs]
    fig.legend(handles=handles, loc="lower center", ncol=len(configs), frameon=False, bbox_to_anchor=(0.5, -0.01))
    fig.suptitle("KL and reward during RL: mean over seeds, band = min..max over seeds")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


# ---------------------------------------------------------------- 2. speed

def speed_section(sp, traces, out):
    parts = ["## 2. When MXFP8 pays off"]
    if sp is None:
        drop_stale(out, "sweep.png", "step_split.png", "trace.png")
        parts.append("Not run (no `speed.json`).")
        return "\n\n".join(parts)
    sw = sp["sweep"]
    recipes = unique(r["recipe"] for r in sw["results"])
    parts.append(f"Training micro-batch sweep on `{sw['preset']}`: {sw['tokens']} tokens per step in sequences of "
                 f"{sw['seq_len']}, {sw['threads']} threads; in brackets: throughput relative to {recipes[0]}. "
                 "Time per micro-batch fitted as fixed + per-token x B.")
    budgets = unique(r["budget"] for r in sw["results"])
    by = {(r["recipe"], r["budget"]): r for r in sw["results"]}
    parts.append(table(["budget (tokens)"] + [f"{rc} tokens/s" for rc in recipes],
                       [[b] + [f"{by[rc, b]['tokens_per_s']:.0f} ({fmt_ratio(by[rc, b]['ratio_to_first'])})"
                               if (rc, b) in by else "—" for rc in recipes] for b in budgets]))
    fits = sw.get("fits", {})
    if fits:
        parts.append(table(["recipe", "fixed per micro-batch (ms)", "per token (us)", "R^2"],
                           [[name, fmt_ms(f["fixed_per_microbatch_s"]), f"{f['per_token_s'] * 1e6:.3g}",
                             fmt_g(f["r2"])] for name, f in fits.items()]))
    for name, x in sw.get("crossover", {}).items():
        parts.append(f"**{name} vs {x['vs']}:** {x['verdict']}. Measured: {x['measured']}.")
    if not sw.get("crossover"):
        parts.append("No crossover computed (fewer than two budgets or one recipe).")
    if sw["results"]:
        parts.append(save_fig(plot_sweep(sw, recipes), out, "sweep.png"))
    parts.append("### RL step time split\n\nMean ms per RL step; sync includes the checks.\n\n" +
                 table(["preset", "recipe", "sampler", "steps", "generate", "score", "train", "sync", "of which checks",
                        "step"],
                       [[r["preset"], r["recipe"], r["sampler"], r["steps"]] +
                        [fmt_ms(r[k]) for k in ("generate_s", "score_s", "train_s", "sync_s", "checks_s", "step_s")]
                        for r in sp["rl_split"]]))
    if sp["rl_split"]:
        parts.append(save_fig(plot_step_split(sp["rl_split"]), out, "step_split.png"))
    else:
        drop_stale(out, "step_split.png")
    if traces:
        parts.append(trace_section(traces, out))
    else:
        drop_stale(out, "trace.png")
    parts.append("### Against the paper\n\n" +
                 table(["what", "preset", "paper", "mxrl (mxfp8 vs bf16)", "bf16 (ms)", "mxfp8 (ms)"],
                       [[p["what"], p["preset"], p["paper"], fmt_pct(p["mxrl_change_pct"], 1)] +
                        [fmt_ms(p[k]) if k in p else "—" for k in ("bf16_s", "mxfp8_s")] for p in sp["paper"]]))
    return "\n\n".join(parts)


def plot_sweep(sw, recipes):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    budgets = [r["microbatch_tokens"] for r in sw["results"]]
    for i, rc in enumerate(recipes):
        pts = sorted((r["microbatch_tokens"], r["microbatch_s"]) for r in sw["results"] if r["recipe"] == rc)
        ax.plot([p[0] for p in pts], [p[1] * 1e3 for p in pts], "o", color=f"C{i}", label=f"{rc} measured")
        fit = sw.get("fits", {}).get(rc)
        if fit and pts:
            lo, hi = pts[0][0], pts[-1][0]
            xs = [lo * (hi / lo) ** (k / 50) for k in range(51)]
            ax.plot(xs, [(fit["fixed_per_microbatch_s"] + fit["per_token_s"] * x) * 1e3 for x in xs], "-",
                    color=f"C{i}", alpha=0.7, label=f"{rc} fit")
    for name, x in sw.get("crossover", {}).items():
        if x.get("tokens") is not None and min(budgets) <= x["tokens"] <= max(budgets):  # no extrapolated lines
            ax.axvline(x["tokens"], color="0.4", ls=":", lw=1, label=f"{name} crossover, B = {x['tokens']:.0f}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.xaxis.set_major_formatter(plain)
    ax.yaxis.set_major_formatter(plain)
    times = [r["microbatch_s"] for r in sw["results"] if r["microbatch_s"] > 0]
    narrow = bool(times) and max(times) < 10 * min(times)  # under a decade: label the minor ticks too
    ax.yaxis.set_minor_formatter(plain if narrow else NullFormatter())
    ax.set_xlabel("tokens per micro-batch B (log scale)")
    ax.set_ylabel("time per micro-batch (ms, log)")
    ax.set_title(f"{sw['preset']}: micro-batch time vs size, fit = fixed + per-token x B")
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def plot_step_split(split):
    """Stacked bars per (preset, recipe); one panel per preset, each on its own ms scale (the presets differ 10x+)."""
    segments = [("generate", lambda r: r["generate_s"]), ("score", lambda r: r["score_s"]),
                ("train", lambda r: r["train_s"]), ("sync (minus checks)", lambda r: r["sync_s"] - r["checks_s"]),
                ("checks", lambda r: r["checks_s"]),
                ("other", lambda r: r["step_s"] - r["generate_s"] - r["score_s"] - r["train_s"] - r["sync_s"])]
    presets = list(dict.fromkeys(r["preset"] for r in split))
    groups = [[r for r in split if r["preset"] == p] for p in presets]
    fig, axes = plt.subplots(len(groups), 1, squeeze=False,
                             figsize=(8, max(2.4, 0.45 * len(split) + 0.9 * len(groups) + 0.6)),
                             gridspec_kw={"height_ratios": [len(g) for g in groups]})
    shown = {}
    for ax, preset, rows in zip(axes[:, 0], presets, groups):
        left = [0.0] * len(rows)
        for i, (name, value) in enumerate(segments):
            widths = [max(0.0, value(r)) * 1e3 for r in rows]
            if name == "other" and not any(w > 1e-9 for w in widths):
                continue
            shown[name] = ax.barh(range(len(rows)), widths, left=left,
                                  color=f"C{i}" if name != "other" else "0.75", label=name)
            left = [a + b for a, b in zip(left, widths)]
        ax.set_yticks(range(len(rows)), [f"{r['recipe']} / {r['sampler']} sampler" for r in rows], fontsize=8)
        ax.invert_yaxis()
        ax.set_title(preset, fontsize=9, loc="left")
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("ms per RL step (mean)")
    fig.suptitle("Where an RL step's time goes")
    fig.legend(shown.values(), shown.keys(), loc="center left", bbox_to_anchor=(0.8, 0.5), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    return fig


def phase_names(traces):
    """The known phases, then any others the traces have (so that "other" never hides a new phase)."""
    extra = sorted({n for t, _ in traces for n in t["phases"]} - set(PHASES) - {"step"})
    return PHASES + extra


def trace_section(traces, out):
    entries = [t for t, _ in traces]
    names = phase_names(traces)
    same = len({(t["preset"], t["tokens"]) for t in entries}) == 1
    workers = sorted({int(tid) for t in entries for by in t["phases"].values() for tid in by if tid != "0"})
    links = ", ".join(f"[{t['file']}]({t['file']})" for t in entries)
    per_step = (f"one training step of `{entries[0]['preset']}` on {entries[0]['tokens']} tokens per recipe"
                if same else "one training step per recipe")
    pool = ("" if not workers else " (workers: the pool thread)" if len(workers) == 1 else
            f" (workers: summed over {len(workers)} pool threads)")
    text = ("### One training step, traced\n\n"
            f"The trace files open in [Perfetto](https://ui.perfetto.dev) or `chrome://tracing`: {links}. "
            f"Below, {per_step}: ms per phase on the main thread, and \"main / workers\" where pool threads have "
            f"spans too{pool}; other (main): the step minus the main thread's phases.")
    body = []
    for t in entries:
        ph = t["phases"]
        step = ph["step"]["0"]
        cells = []
        for name in names:
            if name not in ph:
                cells.append("—")
                continue
            main_s = ph[name].get("0", 0.0)
            work_s = sum(v for tid, v in ph[name].items() if tid != "0")
            cells.append(fmt_ms(main_s) + (f" / {fmt_ms(work_s)}" if any(tid != "0" for tid in ph[name]) else ""))
        other = max(0.0, step - sum(ph[n].get("0", 0.0) for n in names if n in ph))
        body.append([t["recipe"]] + ([] if same else [t["preset"], t["tokens"]]) + [fmt_ms(step)] + cells
                    + [fmt_ms(other)])
    text += "\n\n" + table(["recipe"] + ([] if same else ["preset", "tokens"]) + ["step (ms)"]
                           + names + ["other (main)"], body)
    return text + "\n\n" + save_fig(plot_trace(traces, names), out, "trace.png")


def trace_threads(events):
    """(tid -> thread name, process name) from a trace's metadata events."""
    threads, process = {}, None
    for ev in events:
        if ev["ph"] == "M" and ev["name"] == "thread_name":
            threads[ev["tid"]] = ev["args"]["name"]
        elif ev["ph"] == "M" and ev["name"] == "process_name":
            process = ev["args"]["name"]
    return threads, process


def plot_trace(traces, names):
    colors = dict(PHASE_COLORS, **{n: EXTRA_COLORS[i % len(EXTRA_COLORS)]
                                   for i, n in enumerate(n for n in names if n not in PHASE_COLORS)})
    panels = []
    for t, data in traces:
        spans = [ev for ev in data["traceEvents"] if ev["ph"] == "X"]
        steps = [ev for ev in spans if ev["name"] == "step"]
        t0 = min(ev["ts"] for ev in steps) if steps else min((ev["ts"] for ev in spans), default=0.0)
        thread_names, process = trace_threads(data["traceEvents"])
        tids = sorted({ev["tid"] for ev in spans if ev["name"] != "step"} | {0})
        panels.append((t, spans, steps, t0, thread_names, process, tids))
    height = sum(0.45 * (len(p[6]) + 1) + 0.9 for p in panels) + 0.6
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, height), sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": [len(p[6]) + 1 for p in panels]})
    used = []
    for ax, (t, spans, steps, t0, thread_names, process, tids) in zip(axes[:, 0], panels):
        rows = {tid: i + 1 for i, tid in enumerate(tids)}  # row 0: the step
        for ev in steps:
            ax.broken_barh([((ev["ts"] - t0) / 1e3, ev["dur"] / 1e3)], (-0.1, 0.2), facecolors="black", lw=0)
        for name in names + sorted({ev["name"] for ev in spans} - set(names) - {"step"}):
            for tid in tids:
                bars = [((ev["ts"] - t0) / 1e3, ev["dur"] / 1e3) for ev in spans
                        if ev["name"] == name and ev["tid"] == tid]
                if bars:
                    ax.broken_barh(bars, (rows[tid] - 0.38, 0.76), facecolors=colors.get(name, "0.5"), lw=0,
                                   edgecolor="none")
                    used.append(name)
        labels = ["step"] + [thread_names.get(tid, "main" if tid == 0 else f"thread {tid}") for tid in tids]
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.set_ylim(len(labels) - 0.5, -0.5)
        ax.set_title(f"{process or t['recipe']}: step {fmt_ms(t['phases']['step']['0'])} ms ({t['file']})",
                     fontsize=9, loc="left")
        ax.grid(axis="x", alpha=0.3)
        ax.set_axisbelow(True)
        ax.tick_params(axis="y", length=0)
        for side in ("top", "right", "left"):
            ax.spines[side].set_visible(False)
    ends = [(ev["ts"] + ev["dur"] - p[3]) / 1e3 for p in panels for ev in p[1]]
    axes[-1][0].set_xlim(0, max(ends, default=1.0) * 1.01 or 1.0)
    axes[-1][0].set_xlabel("ms from the start of the step")
    shown = [n for n in unique(used) if n in names] + [n for n in unique(used) if n not in names]
    handles = [Patch(facecolor=colors.get(n, "0.5"), label=n) for n in shown]
    if any(p[2] for p in panels):
        handles.append(Patch(facecolor="black", label="step"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, bbox_to_anchor=(0.5, 0),
               fontsize=8)
    fig.suptitle("One training step: spans per thread (white: no span; open the trace files in Perfetto to zoom)")
    fig.tight_layout(rect=(0, 0.3 / height, 1, 1))
    return fig


# ---------------------------------------------------------------- 3. faults

def demote(md):
    lines, fenced = md.splitlines(), False
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    out = []
    for line in lines:
        if line.lstrip().startswith("```"):
            fenced = not fenced
        out.append("#" + line if not fenced and line.startswith("#") else line)
    return "\n".join(out).strip()


def faults_section(fj, md):
    parts = ["## 3. How syncs fail"]
    if fj is None:
        parts.append("Not run (no `faults/faults.json`).")
        return "\n\n".join(parts)
    rows = [r for r in fj["rows"] if r["applicable"]]
    skipped = len(fj["rows"]) - len(rows)
    silent = sum(r["silent_without_checks"] for r in rows)
    first = sum(r["first_opportunity"] for r in rows)
    nothing = [f"{r['preset']} {r['fault']}" for r in rows if not r["fired"]]
    parts.append(f"Summary: {len(rows)} applicable fault runs ({skipped} not applicable to their preset); "
                 f"{silent} of {len(rows)} were silent without checks (no error, no NaN, no visible reward drop); "
                 f"{first} were caught at the first opportunity; {len(nothing)} were caught by no check"
                 + (f" ({', '.join(nothing)})." if nothing else "."))
    parts.append("(`faults/faults.md` is missing.)" if md is None else demote(md))
    return "\n\n".join(parts)


# ---------------------------------------------------------------- 4. a real engine

def engine_section(out):
    """The engine part (mxrl-vllm experiment / bench / diverge): their markdown, a KL plot, diverge's plots."""
    parts = ["## 4. A real engine: vLLM as the sampler"]
    md, speed = read_text(os.path.join(out, "engine.md")), read_text(os.path.join(out, "engine_speed.md"))
    ej = os.path.join(out, "engine.json")
    if md is None or not os.path.exists(ej):
        drop_stale(out, "engine_kl.png")
        parts.append("Not run (no `engine.json`; `mxrl experiment engine` runs it where vLLM is installed).")
    else:
        with open(ej) as f:
            e = json.load(f)
        parts.append(demote(md))
        parts.append(save_fig(plot_engine(e), out, "engine_kl.png"))
    if speed is not None:
        parts.append("### Throughput\n\n" + demote(speed))
    for name in sorted(os.listdir(out)):  # diverge-dense/, diverge-moe/: python -m mxrl diverge's output
        md = read_text(os.path.join(out, name, "diverge.md")) if name.startswith("diverge-") else None
        if md is not None:
            parts.append(demote(md))
            if os.path.exists(os.path.join(out, name, "diverge.png")):
                parts.append(f"![{name}]({name}/diverge.png)")
    return "\n\n".join(parts)


def plot_engine(e):
    presets = list(e["presets"])
    fig, axes = plt.subplots(1, len(presets), figsize=(6 * len(presets), 3.6), squeeze=False)
    for ax, preset in zip(axes[0], presets):
        rows = e["presets"][preset]["rows"]
        names = list(rows)
        floor = min([r["kl"] for r in rows.values() if r["kl"] > 0] or [1e-12]) / 10
        vals = [max(rows[n]["kl"], floor) for n in names]
        err = [[max(rows[n]["kl"] - max(rows[n]["lo"], floor), 0) for n in names],
               [max(rows[n]["hi"] - rows[n]["kl"], 0) for n in names]]
        bars = ax.bar(range(len(names)), vals, yerr=err, capsize=3,
                      color=["#bbbbbb" if rows[n]["kl"] == 0 else "#4477aa" for n in names])
        for b, n in zip(bars, names):
            if rows[n]["kl"] == 0:
                ax.annotate("0 (bitwise)", (b.get_x() + b.get_width() / 2, floor), ha="center", va="bottom",
                            fontsize=7, rotation=90)
        ax.set_yscale("log")
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=35, ha="right", fontsize=8)
        ax.set_title(preset)
        ax.set_ylabel("exact KL(sampler || learner) / token")
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- README

def header(m, rep):
    rep, c = rep or {}, m["config"] if m else {}
    threads = rep.get("threads", c.get("threads"))
    parts = rep.get("parts", {})
    facts = [("parts: " + ", ".join(f"{name} ({p['mode']}, {fmt_duration(p['seconds'])}, {p['date']})"
                                    for name, p in parts.items())) if parts else None,
             f"total wall time {fmt_duration(rep['seconds'])}" if "seconds" in rep else None,
             f"date {rep.get('date', c.get('date'))}" if "date" in rep or "date" in c else None,
             f"machine: {rep['machine']}" if "machine" in rep else None,
             f"{threads} threads" if threads is not None else None,
             f"matching took {fmt_duration(c['seconds'])}" if "seconds" in c else None]
    facts = [f for f in facts if f]
    return "# mxrl report" + ("\n\nRun: " + "; ".join(facts) + "." if facts else "")


def main(argv):
    if len(argv) != 2:
        raise ReportError("usage: report.py DIR")
    out = argv[1]
    if not os.path.isdir(out):
        raise ReportError(f"{out}: not a directory")
    p = lambda *names: os.path.join(out, *names)  # noqa: E731
    m, rl = load(p("matching.json"), MATCHING), load(p("rl_kl.json"), RL_KL, check_rl_kl)
    sp, fj = load(p("speed.json"), SPEED, check_speed), load(p("faults", "faults.json"), FAULTS, check_faults)
    traces = load_traces(out, sp)
    rep, faults_md = load(p("report.json"), REPORT), read_text(p("faults", "faults.md"))
    readme = "\n\n".join([
        header(m, rep), matching_section(m, rl, out), speed_section(sp, traces, out),
        faults_section(fj, faults_md), engine_section(out),
        "## How to regenerate\n\n`mxrl report --out DIR` (full) or `mxrl report --quick --out DIR` (quick). "
        "To rebuild only this page and its plots from the JSON: `/usr/bin/python3 scripts/report.py DIR`."]) + "\n"
    write_atomic(p("README.md"), readme)


if __name__ == "__main__":
    try:
        main(sys.argv)
    except ReportError as e:
        print(f"report.py: {e}", file=sys.stderr)
        sys.exit(1)
