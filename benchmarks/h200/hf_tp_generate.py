"""A tensor-parallel Hugging Face `generate` as a user writes one with torch.distributed: no NVTX,
no smlens import.

Each rank builds a Llama-shaped model whose attention heads, KV heads and MLP width are its share
(Megatron-style: q/k/v and gate/up column-parallel, o_proj and down_proj row-parallel) and sums the
row-parallel outputs with `dist.all_reduce` in a forward hook, as vLLM's RowParallelLinear does.
Random bf16 weights (no download), a warm-up request then the measured one, greedy. Started by a
launcher (torchrun), one process per GPU:

    smlens profile --tp 2 -- python3 -m torch.distributed.run --nproc-per-node 2 \\
        benchmarks/h200/hf_tp_generate.py --model llama-3.1-8b --layers 8 --batch 8 --prompt 512

On a machine without GPUs it runs on the CPU with gloo (`--model tiny`).
"""
import argparse
import hashlib
import json
import os
import time

import torch
import torch.distributed as dist
import transformers

# config.json of each model on its Hugging Face card (layers cut by --layers)
CONFIGS = {
    "llama-3.1-8b": dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=128, vocab_size=128256, rope_theta=500000.0,
                         rms_norm_eps=1e-5, max_position_embeddings=8192),
    "llama-3.1-70b": dict(hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
                          num_key_value_heads=8, head_dim=128, vocab_size=128256, rope_theta=500000.0,
                          rms_norm_eps=1e-5, max_position_embeddings=8192),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=16, vocab_size=100, max_position_embeddings=256),
}


def all_reduce_output(module, inputs, output):
    dist.all_reduce(output)  # in place: the row-parallel partial sums become the whole


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="llama-3.1-8b", choices=sorted(CONFIGS))
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=9)
    args = parser.parse_args()
    started = time.perf_counter()
    gpu = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if gpu:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if gpu else "gloo")
    tp = dist.get_world_size()
    device = f"cuda:{local_rank}" if gpu else "cpu"
    values = dict(CONFIGS[args.model])
    for key in ("num_attention_heads", "num_key_value_heads", "intermediate_size"):
        values[key] //= tp  # this rank's share
    config = transformers.LlamaConfig(num_hidden_layers=args.layers, **values)
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()
    for layer in model.model.layers:
        layer.self_attn.o_proj.register_forward_hook(all_reduce_output)
        layer.mlp.down_proj.register_forward_hook(all_reduce_output)
    ids = torch.randint(0, config.vocab_size, (args.batch, args.prompt), device=device)
    built = time.perf_counter()
    times, out = [], None
    for _ in range(2):  # a warm-up request, then the measured one
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.new_tokens,
                             min_new_tokens=args.new_tokens, do_sample=False, pad_token_id=0)
        if gpu:
            torch.cuda.synchronize()
        times.append(round(time.perf_counter() - start, 3))
    if dist.get_rank() == 0:
        print(json.dumps({"model": args.model, "tp": tp, "layers": args.layers, "batch": args.batch,
                          "prompt": args.prompt, "new_tokens": args.new_tokens, "device": device,
                          "build_s": round(built - started, 3), "generate_s": times,
                          "tokens_sha256": hashlib.sha256(out.cpu().numpy().tobytes()).hexdigest()[:16]}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
