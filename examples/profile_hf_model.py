"""Profile your own Hugging Face model. This is the program, as you would write it (nothing of smlens
in it); smlens runs it under Nsight Compute and names phases, layers and roles from its modules:

    smlens profile -- python3 examples/profile_hf_model.py --model Qwen/Qwen2.5-7B-Instruct --batch 8
    smlens views latest                      # the verdict, the gap, the eight views
    smlens report latest -o report.html      # one offline HTML file

--model is a hub name or a local folder, loaded with from_pretrained (HF_HUB_OFFLINE=1 for a cached
one); --random builds the same architecture from its config.json with random weights (the same kernels
and shapes, nothing large to download); --tiny a 2-layer Llama of hidden 64, nothing downloaded at all
(a dry run on a CPU, what tests/test_examples.py profiles with a fake ncu). It generates twice, a
warm-up request and then the measured one, so that the process has a cold prefill, a warm prefill and
decode steps: smlens profiles layer 0 of each (`smlens profile --plan -- ...` shows which, before ncu runs).
"""
import argparse
import json
import time

import torch
import transformers


def load(args):
    dtype = getattr(torch, args.dtype)
    if args.tiny:
        config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                          num_key_value_heads=2, num_hidden_layers=2, vocab_size=100,
                                          max_position_embeddings=256)
        return transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    if args.random:
        config = transformers.AutoConfig.from_pretrained(args.model)
        if args.layers:
            config.num_hidden_layers = args.layers
        return transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    return transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="meta-llama/Llama-3.1-8B", help="a hub name or a local folder")
    parser.add_argument("--random", action="store_true", help="the model's config, random weights")
    parser.add_argument("--tiny", action="store_true", help="a tiny Llama built here: nothing downloaded")
    parser.add_argument("--layers", type=int, help="with --random: keep this many layers")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--prompt", type=int, default=512, help="prompt tokens per sequence")
    parser.add_argument("--new-tokens", type=int, default=4)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    with torch.device(device):
        model = load(args).eval()
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (args.batch, args.prompt), device=device)  # token ids; a tokenizer's do too
    seconds = []
    for _ in range(2):  # a warm-up request, then the measured one
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.new_tokens,
                             min_new_tokens=args.new_tokens, do_sample=False, pad_token_id=0)
        if device == "cuda":
            torch.cuda.synchronize()
        seconds.append(round(time.perf_counter() - start, 3))
    print(json.dumps({"model": "tiny" if args.tiny else args.model, "device": device, "batch": args.batch,
                      "prompt": args.prompt, "new_tokens": out.shape[1] - args.prompt, "generate_s": seconds}))


if __name__ == "__main__":
    main()
