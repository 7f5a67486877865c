"""What the annotation's hooks cost a module call (issue 10's "no harm": under 5 us per module call
with no profiler attached).

A tiny Hugging Face Llama (hidden 64, 4 layers) runs one-token forwards on the CPU, where a forward
is short and the hooks' Python is a large part of it: the worst case for a relative cost. Four
ways, interleaved, each timed over `--forwards` forwards, `--repeats` times:
  plain         no hooks
  no tool       the annotation started as `smlens profile` starts it, with no NVTX tool attached
                (the `nvtx` package's dummy domain): it installs nothing
  torch hooks   two global module hooks that do nothing: what torch's hook dispatch costs a call
  tool          the annotation with a domain whose push/pop do nothing: the whole annotation path
                (module lookup, shape reading, message formatting) less NVTX's own cost
Times are the CPU time of the timing thread (torch runs single-threaded here), so other work on a
shared machine does not count. The cost per module call is (time - plain's time) / module calls
per forward, from the fastest of the repeats and from the medians.

    python3 benchmarks/bench_annotate.py --forwards 200 --repeats 15   [--quick]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import transformers

from profiler.run.annotate.runtime import Annotator
from suite import arguments
from views import vocabulary


class NullDomain:
    def get_event_attributes(self, message):
        return message

    def push_range(self, attributes):
        pass

    def pop_range(self):
        pass


class NoopHooks:
    def install(self, torch):
        module_mod = torch.nn.modules.module
        self.handles = [module_mod.register_module_forward_pre_hook(lambda m, a: None),
                        module_mod.register_module_forward_hook(lambda m, a, o: None, always_call=True)]
        return self

    def remove(self):
        for handle in self.handles:
            handle.remove()


def module_calls(model, ids) -> int:
    count = [0]
    handle = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda module, args: count.__setitem__(0, count[0] + 1))
    with torch.no_grad():
        model(ids)
    handle.remove()
    return count[0]


def timed(model, ids, forwards: int) -> float:
    with torch.no_grad():
        start = time.thread_time()
        for _ in range(forwards):
            model(ids, use_cache=False)
        return (time.thread_time() - start) / forwards


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--forwards", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=15)
    args = arguments(parser, quick={"forwards": 3, "repeats": 1})
    torch.set_num_threads(1)
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                      num_key_value_heads=2, num_hidden_layers=4, vocab_size=100)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 100, (1, 1))
    calls = module_calls(model, ids)
    ways = {"plain": None, "no tool": lambda: Annotator(vocabulary, None),
            "torch hooks": lambda: NoopHooks(), "tool": lambda: Annotator(vocabulary, NullDomain())}
    times = {name: [] for name in ways}
    timed(model, ids, args.forwards)  # warm-up
    for _ in range(args.repeats):
        for name, make in ways.items():
            annotator = make().install(torch) if make else None
            timed(model, ids, 3)  # the first forward learns the model's modules
            times[name].append(timed(model, ids, args.forwards))
            if annotator:
                annotator.remove()
    result = {"module_calls_per_forward": calls, "torch": torch.__version__}
    for label, pick in (("fastest", min), ("median", statistics.median)):
        plain = pick(times["plain"])
        result[f"forward_us_{label}"] = {name: round(pick(t) * 1e6, 1) for name, t in times.items()}
        result[f"per_module_call_us_{label}"] = {
            name: round((pick(t) - plain) / calls * 1e6, 2) for name, t in times.items() if name != "plain"}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
