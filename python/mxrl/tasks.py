"""mxrl's verifiable tasks from Python: the problems an experiment samples.

``problems(spec, split="eval", seed=1, count=1, start=0)`` returns
``[(prompt, answer), ...]``: problems ``start .. start+count-1`` of the task
``spec`` ("addition:digits=3", "jsonl:PATH", ...), drawn exactly as ``mxrl sft``,
``mxrl rl`` and ``mxrl experiment`` draw them (deterministic in split, seed and
index; the eval split never shares a prompt with train). Encode prompts with the
checkpoint's ``mxrl.Tokenizer``.
"""

from __future__ import annotations

from . import _mxrl

__all__ = ["problems"]

problems = _mxrl._tasks_problems
