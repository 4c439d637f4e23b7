#!/usr/bin/env python3
"""mxrl beside PyTorch (transformers) and llama.cpp (llama-cpp-python) on this CPU.

Each competitor runs interleaved with mxrl in the same process tree (mxrl, then
the competitors, round after round), so that machine drift hits both alike;
each figure is the median over rounds, each ratio the median of the per-round
ratios mxrl / competitor (above 1: mxrl is faster). Nothing is hard-coded:
every figure is measured in this run. Run by hand (not in CI), normally through
scripts/bench/competitors.sh, which makes the venv this needs.

Sections:
  train   training tokens/s of the tiny-dense and tiny-moe presets: mxrl's bf16
          and mxfp8 recipes beside transformers (fp32; pure bf16; fp32 weights
          under bf16 autocast; with --compile, torch.compile of the best).
  decode  Qwen3-0.6B shape, random weights: prefill tokens/s (batch 1) and
          decode tokens/s with a KV cache (batch 1 and 32), mxrl bf16 / mxfp8
          beside transformers bf16 and llama.cpp BF16 / Q8_0 (the same random
          model written to GGUF).
"""
import argparse, contextlib, copy, ctypes, datetime, gc, json, os, platform, shutil
import statistics, subprocess, sys, tempfile, time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = ("train", "decode")
VARIANTS = ("fp32", "bf16", "autocast")
QWEN3_06B = dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                 num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
                 max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1e6)


def die(msg):
    print(f"competitors.py: {msg}", file=sys.stderr)
    sys.exit(1)


def median(xs):
    return statistics.median(xs)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


COMMITS = set()  # the git commits mxrl's own runs name in their provenance (the header prints them)


def run_mxrl(binary, args):
    """One `mxrl bench ... --json` run; returns the JSON of its last stdout line."""
    for _ in range(60):  # another build may be replacing the binary: wait up to 2 minutes
        if os.access(binary, os.X_OK):
            break
        time.sleep(2)
    p = subprocess.run([str(binary), *map(str, args), "--json"], capture_output=True, text=True)
    if p.returncode != 0 or not p.stdout.strip():
        die(f"{binary} {' '.join(map(str, args))} failed (exit {p.returncode}): {p.stderr.strip()[-500:]}")
    j = json.loads(p.stdout.strip().splitlines()[-1])
    COMMITS.add(j.get("provenance", {}).get("commit", "?"))
    return j


def kernels(a):
    """mxrl's --kernels choice (the pair-chain kernel family), when one was asked for."""
    return ["--kernels", a.kernels] if a.kernels else []


class Table:
    """Rows of (measurement, mxrl per-round figures, competitor per-round figures, unit)."""

    def __init__(self):
        self.rows, self.notes = [], []

    def add(self, what, mx, comp, unit):
        ratio = median([a / b for a, b in zip(mx, comp)]) if mx and comp else None
        self.rows.append(dict(measurement=what, unit=unit, mxrl=median(mx) if mx else None, mxrl_rounds=mx,
                              competitor=median(comp) if comp else None, competitor_rounds=comp, ratio=ratio))

    def skip(self, what, reason):
        self.rows.append(dict(measurement=what, skipped=reason))

    def markdown(self):
        out = ["| measurement | mxrl | competitor | ratio mxrl/competitor |", "|---|---:|---:|---:|"]
        for r in self.rows:
            if "skipped" in r:
                out.append(f"| {r['measurement']} | | | skipped: {r['skipped']} |")
                continue
            f = lambda v: "" if v is None else f"{v:,.1f} {r['unit']}"
            out.append(f"| {r['measurement']} | {f(r['mxrl'])} | {f(r['competitor'])} | "
                       f"{'' if r['ratio'] is None else format(r['ratio'], '.2f')} |")
        return "\n".join(out + [f"\n{n}" for n in self.notes])


# ---------------------------------------------------------------- training

def torch_trainer(ckpt, variant, a, compile_=False):
    """A closure that runs one full training step and returns its seconds."""
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32)
    if variant == "bf16":
        model = model.to(torch.bfloat16)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    fwd = torch.compile(model) if compile_ else model
    vocab, n_micro, n_seq = model.config.vocab_size, a.tokens // a.micro_batch_tokens, a.micro_batch_tokens // a.seq_len
    cast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if variant == "autocast" else contextlib.nullcontext

    def step():
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for _ in range(n_micro):  # gradient accumulation over micro-batches of a.micro_batch_tokens
            ids = torch.randint(0, vocab, (n_seq, a.seq_len))
            with cast():
                loss = fwd(input_ids=ids, labels=ids).loss  # shifted next-token cross-entropy
            (loss / n_micro).backward()
        opt.step()
        return time.perf_counter() - t0

    step()  # warm-up (and compilation), not timed
    return step


def mxrl_train(a, preset, into):
    """One mxrl training bench run (bf16 and mxfp8); appends tokens/s per recipe to into[recipe]."""
    j = run_mxrl(a.mxrl, ["bench", "train", "--preset", preset, "--recipe", "bf16", "--recipe", "mxfp8",
                          "--tokens", a.tokens, "--micro-batch-tokens", a.micro_batch_tokens,
                          "--seq-len", a.seq_len, "--reps", a.reps, "--threads", a.threads, *kernels(a)])
    for r in j["results"]:
        into.setdefault(r["recipe"], []).append(r["tokens_per_s"])


def init_checkpoint(binary, preset, ckpt):
    """`mxrl init --preset` into ckpt, unless a checkpoint is already there."""
    if (Path(ckpt) / "config.json").exists():
        return
    p = subprocess.run([str(binary), "init", "--preset", preset, "--out", str(ckpt)], capture_output=True, text=True)
    if p.returncode:
        die(f"mxrl init --preset {preset} failed: {p.stderr.strip()[-500:]}")


def bench_train(a, table, raw):
    for preset in a.presets:
        ckpt = Path(a.work_dir) / f"ckpt-{preset}"
        init_checkpoint(a.mxrl, preset, ckpt)
        log(f"train {preset}: loading transformers variants {', '.join(a.variants)}")
        steps = {v: torch_trainer(str(ckpt), v, a) for v in a.variants}
        mx, tor = {}, {v: [] for v in steps}
        for rnd in range(a.rounds):
            log(f"train {preset}: round {rnd + 1}/{a.rounds}")
            mxrl_train(a, preset, mx)
            for v, step in steps.items():
                tor[v].append(a.tokens / median([step() for _ in range(a.reps)]))
        best = max(tor, key=lambda v: median(tor[v]))
        if a.compile:
            log(f"train {preset}: torch.compile of {best} (compiling, then {a.rounds} rounds)")
            del steps
            gc.collect()
            cstep, cname = torch_trainer(str(ckpt), best, a, compile_=True), f"compile({best})"
            tor[cname], mx2 = [], {}
            for rnd in range(a.rounds):  # interleaved again, so the compiled figures get their own mxrl rounds
                mxrl_train(a, preset, mx2)
                tor[cname].append(a.tokens / median([cstep() for _ in range(a.reps)]))
        for recipe, figs in mx.items():
            for v in tor:
                tag = " (best eager)" if v == best else ""
                mine = mx2[recipe] if v.startswith("compile(") else figs
                table.add(f"{preset} train, mxrl {recipe} vs torch {v}{tag}", mine, tor[v], "tok/s")
        raw[f"train/{preset}"] = dict(mxrl=mx, torch=tor, best_eager=best, mxrl_beside_compile=mx2 if a.compile else None)
    table.notes.append(f"train: {a.tokens} tokens/step in micro-batches of {a.micro_batch_tokens}, sequences of "
                       f"{a.seq_len}, median of {a.reps} timed steps per round; torch: fwd + CE loss + bwd + AdamW, "
                       "random token ids, warm-up step excluded; autocast = fp32 weights under autocast(cpu, bf16).")


# ---------------------------------------------------------------- decode: transformers

def torch_decode_model():
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(Qwen3Config(**QWEN3_06B), dtype=torch.bfloat16).eval()


def torch_decode(model, batch, a, saved):
    """Prefill (timed at batch 1) then a.steps greedy decode steps with the KV cache."""
    import inspect, torch
    kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"  # renamed in 5.x
    kv = lambda out: getattr(out, kw)
    with torch.inference_mode():
        prefill_s = None
        if batch == 1 or batch not in saved:
            ids = torch.randint(0, QWEN3_06B["vocab_size"], (batch, a.prompt_len))
            t0 = time.perf_counter()
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            prefill_s = time.perf_counter() - t0
            saved[batch] = (kv(out), out.logits[:, -1].argmax(-1, keepdim=True))
        cache, nxt = copy.deepcopy(saved[batch][0]), saved[batch][1]  # later rounds restart from the saved prompt
        t0 = time.perf_counter()
        for _ in range(a.steps):
            out = model(input_ids=nxt, use_cache=True, **{kw: cache})
            cache, nxt = kv(out), out.logits[:, -1].argmax(-1, keepdim=True)
        decode_s = time.perf_counter() - t0
    return dict(prefill=batch * a.prompt_len / prefill_s if prefill_s else None, decode=batch * a.steps / decode_s)


# ---------------------------------------------------------------- decode: llama.cpp

def write_gguf(model, path, qtype):
    """The transformers model as a qwen3 GGUF (what convert_hf_to_gguf.py writes, minus a real tokenizer)."""
    import gguf, numpy as np, torch
    c = model.config
    ftype = {"BF16": gguf.LlamaFileType.MOSTLY_BF16, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[qtype]
    w = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.QWEN3])
    w.add_context_length(c.max_position_embeddings); w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers); w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads); w.add_head_count_kv(c.num_key_value_heads)
    w.add_key_length(c.head_dim); w.add_value_length(c.head_dim); w.add_rope_freq_base(QWEN3_06B["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps); w.add_file_type(ftype); w.add_vocab_size(c.vocab_size)
    # A stand-in SentencePiece-style vocabulary of the right size: the bench feeds token ids, never text.
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    toks += [f"t{i}" for i in range(len(toks), c.vocab_size)]
    types += [gguf.TokenType.NORMAL] * (c.vocab_size - len(types))
    w.add_tokenizer_model("llama"); w.add_token_list(toks); w.add_token_scores([0.0] * len(toks))
    w.add_token_types(types); w.add_unk_token_id(0); w.add_bos_token_id(1); w.add_eos_token_id(2)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3, c.num_hidden_layers)
    for hf_name, t in model.state_dict().items():
        if hf_name == "lm_head.weight" and c.tie_word_embeddings:
            continue  # llama.cpp reuses token_embd as the output matrix when there is no output.weight
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            die(f"no GGUF name for {hf_name}")
        if t.dim() == 1:  # norms stay f32, as the converter keeps them
            w.add_tensor(name, t.float().numpy())
        elif qtype == "BF16":
            w.add_tensor(name, t.contiguous().view(torch.int16).numpy().view(np.uint8), raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor(name, gguf.quants.quantize(t.float().numpy(), gguf.GGMLQuantizationType.Q8_0),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()


class LlamaCpp:
    """One GGUF through llama.cpp's C API (llama-cpp-python's bindings): the high-level llama_cpp.Llama holds
    a single sequence, and batch 32 needs 32 sequences in one context."""

    def __init__(self, path, a):
        import llama_cpp as L
        self.L, self.a = L, a
        L.llama_backend_init()
        self._quiet = L.llama_log_callback(lambda level, text, user: None)
        L.llama_log_set(self._quiet, ctypes.c_void_p())
        mp = L.llama_model_default_params()
        self.repack_option = hasattr(mp, "use_extra_bufts")
        if self.repack_option:
            mp.use_extra_bufts = a.llama_repack  # weight repacking into llama.cpp's CPU-specific layouts
        self.model = L.llama_model_load_from_file(str(path).encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        self.vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.ctx = {}

    def _context(self, batch):
        L, a = self.L, self.a
        cp = L.llama_context_default_params()
        per_seq = -(-(a.prompt_len + a.steps + 1) // 256) * 256
        cp.n_ctx, cp.n_seq_max = batch * per_seq, batch
        cp.n_batch = max(batch * a.prompt_len, batch)
        cp.n_ubatch = min(cp.n_batch, 512)
        cp.n_threads = cp.n_threads_batch = a.threads
        ctx = L.llama_init_from_model(self.model, cp)
        if not ctx:
            raise RuntimeError("llama.cpp could not make a context")
        return ctx

    def _decode(self, ctx, per_seq_tokens, pos0):
        """One llama_decode of a token list per sequence; returns the argmax of each sequence's last logits."""
        import numpy as np
        L = self.L
        n = sum(len(t) for t in per_seq_tokens)
        b = L.llama_batch_init(n, 0, 1)
        i, last = 0, []
        for s, toks in enumerate(per_seq_tokens):
            for j, tok in enumerate(toks):
                b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = tok, pos0 + j, 1, int(j == len(toks) - 1)
                b.seq_id[i][0] = s
                i += 1
            last.append(i - 1)
        b.n_tokens = n
        rc = L.llama_decode(ctx, b)
        L.llama_batch_free(b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        return [int(np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(self.vocab,)).argmax())
                for i in last]

    def run(self, batch, rng):
        L, a = self.L, self.a
        fresh = batch == 1 or batch not in self.ctx
        if fresh:  # prompt prefilled once per batch size (timed at batch 1), later rounds cut back to it
            if batch in self.ctx:
                L.llama_free(self.ctx[batch][0])
            ctx = self._context(batch)
            t0 = time.perf_counter()
            nxt = self._decode(ctx, [[int(x) for x in rng.integers(3, self.vocab, a.prompt_len)] for _ in range(batch)], 0)
            prefill_s = time.perf_counter() - t0
            self.ctx[batch] = (ctx, nxt)
        ctx, nxt = self.ctx[batch]
        L.llama_memory_seq_rm(L.llama_get_memory(ctx), -1, a.prompt_len, -1)
        t0 = time.perf_counter()
        for step in range(a.steps):
            nxt = self._decode(ctx, [[t] for t in nxt], a.prompt_len + step)
        decode_s = time.perf_counter() - t0
        return dict(prefill=a.prompt_len / prefill_s if fresh and batch == 1 else None, decode=batch * a.steps / decode_s)

    def close(self):
        for ctx, _ in self.ctx.values():
            self.L.llama_free(ctx)
        self.L.llama_model_free(self.model)


def bench_decode(a, table, raw):
    import numpy as np
    log("decode: building the random Qwen3-0.6B model in transformers (bf16)")
    model = torch_decode_model()
    llamas, llama_skip = {}, None
    if a.no_llama:
        llama_skip = "--no-llama"
    else:
        try:
            import llama_cpp, gguf  # noqa: F401
            for q in ("BF16", "Q8_0"):
                path = Path(a.work_dir) / f"qwen3-0.6b-random-{q}.gguf"
                if not path.exists():
                    log(f"decode: writing {path.name}")
                    write_gguf(model, path.with_suffix(".tmp"), q)
                    path.with_suffix(".tmp").rename(path)
                llamas[q] = LlamaCpp(path, a)
        except Exception as e:  # report the exact reason in the table, and go on without llama.cpp
            llama_skip = f"{type(e).__name__}: {e}"
            llamas = {}
    mx, tor, lla = {}, {}, {}
    saved, rng = {}, np.random.default_rng(0)
    for rnd in range(a.rounds):
        log(f"decode: round {rnd + 1}/{a.rounds}")
        j = run_mxrl(a.mxrl, ["bench", "decode", "--shape", "qwen3-0.6b", "--plan", "bf16", "--plan", "mxfp8",
                              *sum((["--batch", b] for b in a.batches), []), "--prompt-len", a.prompt_len,
                              "--steps", a.steps, "--prefill-reps", a.prefill_reps, "--threads", a.threads,
                              *kernels(a)])
        for r in j["results"]:
            mx.setdefault((r["plan"], r["batch"], "decode"), []).append(r["decode_tokens_per_s"])
            if r["batch"] == 1:
                mx.setdefault((r["plan"], 1, "prefill"), []).append(r["prefill_tokens_per_s"])
        mx.setdefault(("memcpy_gbps",), []).append(j["memcpy_gbps"])
        for b in a.batches:
            for kind, v in torch_decode(model, b, a, saved).items():
                if v is not None:
                    tor.setdefault((b, kind), []).append(v)
            for q, ll in llamas.items():
                for kind, v in ll.run(b, rng).items():
                    if v is not None:
                        lla.setdefault((q, b, kind), []).append(v)
    pairs = [("bf16", "torch bf16", tor, lambda b, k: (b, k)), ("mxfp8", "torch bf16", tor, lambda b, k: (b, k)),
             ("bf16", "llama.cpp BF16", lla, lambda b, k: ("BF16", b, k)),
             ("mxfp8", "llama.cpp Q8_0", lla, lambda b, k: ("Q8_0", b, k))]
    shapes = [(1, "prefill")] + [(b, "decode") for b in a.batches]
    for b, kind in shapes:
        what = f"{a.prompt_len}-token prompt, batch 1" if kind == "prefill" else f"batch {b}, {a.steps} steps"
        for plan, name, comp, key in pairs:
            label = f"qwen3-0.6b {kind} ({what}), mxrl {plan} vs {name}"
            if comp is lla and not llamas:
                table.skip(label, llama_skip)
            else:
                table.add(label, mx[(plan, b, kind)], comp[key(b, kind)], "tok/s")
    for ll in llamas.values():
        ll.close()
    repack = ("off" if not a.llama_repack else "on") if all(l.repack_option for l in llamas.values()) else "no option"
    table.notes.append(f"decode: random-weight Qwen3-0.6B shape, greedy; transformers bf16 with its DynamicCache, "
                       f"logits of the last prompt token only; "
                       f"{f'llama.cpp through its C API, repacking {repack}' if llamas else 'llama.cpp skipped'}; mxrl memcpy bandwidth {median(mx[('memcpy_gbps',)]):.1f} GB/s.")
    raw["decode"] = dict(mxrl={"/".join(map(str, k)): v for k, v in mx.items()},
                         torch={"/".join(map(str, k)): v for k, v in tor.items()},
                         llama={"/".join(map(str, k)): v for k, v in lla.items()}, llama_skipped=llama_skip)


# ---------------------------------------------------------------- main

def header(a):
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    vers = []
    for pkg in ("torch", "transformers", "numpy", "gguf", "llama_cpp_python"):
        try:
            vers.append(f"{pkg} {metadata.version(pkg)}")
        except metadata.PackageNotFoundError:
            vers.append(f"{pkg} absent")
    mx = subprocess.run([str(a.mxrl), "--version"], capture_output=True, text=True).stdout.strip()
    commit = ", ".join(sorted(COMMITS)) or "?"  # header() runs after the benches
    return (f"{a.started} | {cpu} | {a.threads} threads | {a.rounds} rounds | {mx or 'mxrl ?'}, commit {commit} | "
            f"mxrl kernels {a.kernels or 'default'} | {', '.join(vers)} | python {platform.python_version()}")


def parse_args():
    csv = lambda s: [x for x in s.split(",") if x]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="examples:\n  scripts/bench/competitors.sh --json /tmp/competitors.json\n"
                                        "  scripts/bench/competitors.sh --only train --presets tiny-dense --compile\n"
                                        "  scripts/bench/competitors.sh --only decode --no-llama --steps 16")
    ap.add_argument("--mxrl", type=Path, default=ROOT / "build" / "mxrl", help="mxrl binary (default: build/mxrl)")
    ap.add_argument("--kernels", help="pass --kernels K to every mxrl bench run (auto, dot, fma, amx; default: mxrl's own)")
    ap.add_argument("--only", type=csv, default=list(SECTIONS), help="sections to run, comma-separated: train,decode")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; figures are medians over them (3)")
    ap.add_argument("--threads", type=int, default=2, help="threads for mxrl, torch and llama.cpp (2)")
    ap.add_argument("--json", type=Path, help="also write every figure, per round, to this file")
    ap.add_argument("--work-dir", help="keep checkpoints and GGUFs here and reuse them (default: a temp dir)")
    g = ap.add_argument_group("train")
    g.add_argument("--presets", type=csv, default=["tiny-dense", "tiny-moe"], help="(tiny-dense,tiny-moe)")
    g.add_argument("--tokens", type=int, default=16384, help="tokens per optimizer step (16384)")
    g.add_argument("--micro-batch-tokens", type=int, default=4096, help="tokens per micro-batch (4096)")
    g.add_argument("--seq-len", type=int, default=128, help="tokens per sequence (128)")
    g.add_argument("--reps", type=int, default=2, help="timed steps per round, median (2)")
    g.add_argument("--variants", type=csv, default=list(VARIANTS), help="torch eager variants (fp32,bf16,autocast)")
    g.add_argument("--compile", action="store_true", help="also torch.compile the best eager variant (slow to compile)")
    g = ap.add_argument_group("decode")
    g.add_argument("--prompt-len", type=int, default=128, help="prompt tokens per sequence (128)")
    g.add_argument("--steps", type=int, default=32, help="decode steps (32)")
    g.add_argument("--batches", type=lambda s: [int(x) for x in csv(s)], default=[1, 32], help="decode batches (1,32)")
    g.add_argument("--prefill-reps", type=int, default=1, help="mxrl --prefill-reps (1; rounds give the median)")
    g.add_argument("--no-llama", action="store_true", help="skip llama.cpp")
    g.add_argument("--llama-repack", action="store_true", help="let llama.cpp repack weights (default: off)")
    a = ap.parse_args()
    for name, vals, allowed in (("--only", a.only, SECTIONS), ("--variants", a.variants, VARIANTS)):
        if set(vals) - set(allowed):
            ap.error(f"{name}: unknown {sorted(set(vals) - set(allowed))}; choose from {','.join(allowed)}")
    if a.tokens % a.micro_batch_tokens or a.micro_batch_tokens % a.seq_len:
        ap.error("--tokens must be a multiple of --micro-batch-tokens, and that of --seq-len")
    if 1 not in a.batches:
        ap.error("--batches must include 1 (the prefill figure is taken at batch 1)")
    return a


def main():
    a = parse_args()
    if not os.access(a.mxrl, os.X_OK):
        die(f"{a.mxrl} is missing or not executable: build it first (scripts/build.sh)")
    try:
        import torch, transformers  # noqa: F401
    except ImportError as e:
        die(f"{e}: run through scripts/bench/competitors.sh, which makes the venv")
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    tmp = None
    if a.work_dir is None:
        a.work_dir = tmp = tempfile.mkdtemp(prefix="mxrl-competitors-")
    Path(a.work_dir).mkdir(parents=True, exist_ok=True)
    table, raw = Table(), {}
    a.started = datetime.datetime.now().isoformat(timespec="seconds")
    try:
        if "train" in a.only:
            bench_train(a, table, raw)
        if "decode" in a.only:
            bench_decode(a, table, raw)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    head = header(a)
    print(head + "\n")
    print(table.markdown())
    if a.json:
        a.json.write_text(json.dumps(dict(header=head, args={k: str(v) for k, v in vars(a).items()},
                                          rows=table.rows, raw=raw), indent=1))


if __name__ == "__main__":
    main()
