"""A plain Hugging Face transformers `generate`, as a user writes it: no NVTX, no smlens import.

Random bf16 weights from a config (no hub download) at a published model's layer shapes (the
numbers of each model's config.json), a few layers, one warm-up request then the measured one
(so a process has a cold prefill, a warm prefill and decode steps). Profiled on the H200 with
`smlens profile -- python3 benchmarks/h200/hf_generate.py --model llama-3.1-8b --batch 8`.

    python3 benchmarks/h200/hf_generate.py --model qwen2.5-7b --layers 2 --batch 1 --prompt 512

`--mode` runs it as production code runs: `compile` compiles the forward with inductor
(`model.forward = torch.compile(model.forward)`, default mode), `static` asks `generate` for a static
cache, which makes transformers compile each decode step (mode "reduce-overhead": CUDA graphs).
"""
import argparse
import hashlib
import json
import time

import torch
import transformers

# config.json of each model on its Hugging Face card (layers cut by --layers)
CONFIGS = {
    "llama-3.1-8b": ("LlamaConfig", dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                         num_key_value_heads=8, vocab_size=128256, rope_theta=500000.0,
                                         rms_norm_eps=1e-5, max_position_embeddings=8192)),
    "qwen2.5-7b": ("Qwen2Config", dict(hidden_size=3584, intermediate_size=18944, num_attention_heads=28,
                                       num_key_value_heads=4, vocab_size=152064, rope_theta=1000000.0,
                                       rms_norm_eps=1e-6, max_position_embeddings=8192)),
    "mistral-7b": ("MistralConfig", dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                         num_key_value_heads=8, head_dim=128, vocab_size=32768,
                                         rope_theta=1000000.0, rms_norm_eps=1e-5, sliding_window=None,
                                         max_position_embeddings=8192)),
    "gemma-2-9b": ("Gemma2Config", dict(hidden_size=3584, intermediate_size=14336, num_attention_heads=16,
                                        num_key_value_heads=8, head_dim=256, vocab_size=256000,
                                        rms_norm_eps=1e-6, max_position_embeddings=8192)),
    "mixtral-8x7b": ("MixtralConfig", dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                           num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2,
                                           vocab_size=32000, rope_theta=1000000.0, rms_norm_eps=1e-5,
                                           sliding_window=None, max_position_embeddings=8192)),
    # for a dry run on a CPU
    "tiny-moe": ("MixtralConfig", dict(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                       num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                                       vocab_size=100, max_position_embeddings=256)),
    "tiny": ("LlamaConfig", dict(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                 num_key_value_heads=2, vocab_size=100, max_position_embeddings=256)),
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="llama-3.1-8b", choices=sorted(CONFIGS))
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=3)
    parser.add_argument("--mode", choices=("eager", "compile", "static"), default="eager")
    args = parser.parse_args()
    started = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    config_class, values = CONFIGS[args.model]
    config = getattr(transformers, config_class)(num_hidden_layers=args.layers, **values)
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    if args.mode == "compile":
        model.forward = torch.compile(model.forward)
    cache = {"cache_implementation": "static"} if args.mode == "static" else {}
    ids = torch.randint(0, config.vocab_size, (args.batch, args.prompt), device=device)
    built = time.perf_counter()
    times, out = [], None
    for _ in range(2):  # a warm-up request, then the measured one
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.new_tokens,
                             min_new_tokens=args.new_tokens, do_sample=False, pad_token_id=0, **cache)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(round(time.perf_counter() - start, 3))
    print(json.dumps({"model": args.model, "mode": args.mode, "layers": args.layers, "batch": args.batch,
                      "prompt": args.prompt, "new_tokens": args.new_tokens, "device": device,
                      "build_s": round(built - started, 3), "generate_s": times,
                      "tokens_sha256": hashlib.sha256(out.cpu().numpy().tobytes()).hexdigest()[:16]}))


if __name__ == "__main__":
    main()
