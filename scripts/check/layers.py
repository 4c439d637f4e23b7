#!/usr/bin/env python3
"""The layering rule: a library under src/ includes only itself and the libraries below it.

Order, bottom to top, as docs/architecture.md lists it. src/testing/ is for tests only:
any *_test.cc may include it, no library may. Prints each violation as FILE:LINE and
exits 1 if there is one."""
import pathlib
import re
import sys

ORDER = ["util", "numerics", "kernels", "io", "tokenizer", "tasks", "model", "sampler", "learner", "sync",
         "interop", "faults", "train", "dist", "experiments", "bench", "cli"]
root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".") / "src"
rank = {name: i for i, name in enumerate(ORDER)}
bad = []
for f in sorted(root.rglob("*")):
    if f.suffix not in (".cc", ".h"):
        continue
    folder = f.relative_to(root).parts[0]
    test = f.name.endswith("_test.cc") or folder == "testing"
    for n, line in enumerate(f.read_text().splitlines(), 1):
        m = re.match(r'\s*#\s*include\s+"([a-z_]+)/', line)
        if not m:
            continue
        dep = m.group(1)
        if dep == "testing":
            ok = test
        elif folder == "testing":
            ok = True  # test support sits outside the layers and may include any library
        elif folder not in rank or dep not in rank:
            ok = False
        else:
            ok = rank[dep] <= rank[folder]
        if not ok:
            bad.append(f"{f.relative_to(root.parent)}:{n}: {folder}/ includes {dep}/")
for b in bad:
    print(b)
print(f"layers: {len(bad)} upward includes in {root.parent}/src")
sys.exit(1 if bad else 0)
