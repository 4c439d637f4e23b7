"""Every fault of the vLLM path, at the sync level: caught at the first sync it touches, by its condition's check.

Two syncs of different weights (versions 1 and 2, mxfp8 ship bundles of two
checkpoints) into a fresh engine, the fault active from version 2, a rollout in
between (its prompt fills a 32-token KV block, so the prefix cache holds an
entry). Version 1 must pass every check; version 2 must fail the check of the
fault's condition. The RL-level rows are in test_rl.py.
"""

import pytest

from mxrl_vllm import bundle as B
from mxrl_vllm import checks as C
from mxrl_vllm import faults as F
from mxrl_vllm.engine import Layout
from mxrl_vllm.rl import VllmRemote, make_engine

PROMPT = list(range(1, 41))


def models(checkpoint_factory, export_factory):
    dense = checkpoint_factory("tiny-dense", 0)
    return {"dense": dense, "dense-mx": export_factory(dense), "moe": checkpoint_factory("tiny-moe", 0)}


# What each engine is (the presets' shapes): a fault runs where it can apply.
KINDS = {
    "dense": Layout(4, 256, 8, 2, 32, 768, 86, tied=True),
    "dense-mx": Layout(4, 256, 8, 2, 32, 768, 86, tied=True, mx=True),
    "moe": Layout(4, 256, 8, 2, 32, 0, 86, tied=False, experts=8, moe_intermediate=256),
}
CASES = [(kind, f.name) for kind, lay in KINDS.items() for f in F.FAULTS if F.applies(f, lay) is None]


@pytest.mark.parametrize("kind,fault", CASES, ids=[f"{k}-{f}" for k, f in CASES])
def test_fault_is_caught_at_its_first_sync(kind, fault, checkpoint_factory, export_factory, bundles, closing,
                                           tied_head_packed):
    if fault == "stale-tied-head" and not tied_head_packed:
        pytest.skip("vLLM computes the tied head from the live embedding on this CPU: no packed copy to leave stale")
    model = models(checkpoint_factory, export_factory)[kind]
    lay = Layout.read(model)
    assert (lay.tied, lay.mx, lay.experts > 0) == (KINDS[kind].tied, KINDS[kind].mx, KINDS[kind].experts > 0)
    b1, b2 = bundles("tiny-moe" if kind == "moe" else "tiny-dense")
    remote = VllmRemote(closing(make_engine(str(model), 0, [f"{fault}@2"], block_size=32)))
    r1 = remote.sync(1, b1, {"agreement": False})
    assert r1["applied"] and all(c["passed"] for c in r1["checks"]), r1
    remote.generate(1, [{"id": 0, "prompt": PROMPT, "n": 2, "max_new_tokens": 4, "temperature": 1.0,
                         "stop_tokens": [83], "seed": 0}])
    r2 = remote.sync(2, b2, {"agreement": False})
    bad = {c["name"]: c["findings"] for c in r2["checks"] if c["ran"] and not c["passed"]}
    cond = {c["name"]: c["condition"] for c in F.catalogue()}[fault]
    assert C.NAMES[cond - 1] in bad, (r2.get("error"), bad)
    assert all(bad.values())  # a failed check names what it found


def test_no_fault_no_finding(checkpoint_factory, bundles, closing):
    b1, b2 = bundles("tiny-moe")
    remote = VllmRemote(closing(make_engine(str(checkpoint_factory("tiny-moe", 0)), 0, [], block_size=32)))
    for v, b in ((1, b1), (2, b2)):
        r = remote.sync(v, b, {"agreement": False})
        assert r["applied"] and all(c["passed"] for c in r["checks"]), r
        remote.generate(v, [{"id": 0, "prompt": PROMPT, "n": 2, "max_new_tokens": 4, "temperature": 1.0,
                             "stop_tokens": [83], "seed": 0}])
