"""Decode under a CUDA graph, as serving engines run it, in a plain PyTorch model (no NVTX, no
smlens import): two prefills, one eager decode step, then a one-token forward captured with
`torch.cuda.graph` and replayed for the next steps. Profiled with
`smlens profile --graph-profiling node -- python3 benchmarks/h200/graph_decode.py`: the annotation
opens the captured forward's phase and a decode step around each replay, and the eager step's
kernel order names the graph's kernels."""
import json

import torch
from torch import nn
from torch.nn import functional as F

HIDDEN, HEADS, HEAD_DIM, MLP, LAYERS, BATCH, PROMPT = 2048, 16, 128, 5632, 2, 4, 128


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (
            nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False) for _ in range(4))

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (p(x).view(b, s, HEADS, HEAD_DIM).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=s > 1)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(HIDDEN, MLP, bias=False), nn.Linear(HIDDEN, MLP, bias=False)
        self.down_proj, self.act_fn = nn.Linear(MLP, HIDDEN, bias=False), nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = nn.RMSNorm(HIDDEN), nn.RMSNorm(HIDDEN)
        self.self_attn, self.mlp = Attention(), Mlp()

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(32000, HIDDEN)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(HIDDEN)

    def forward(self, input_ids):
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


def main():
    torch.manual_seed(0)
    model = Model().to("cuda", torch.bfloat16).eval()
    prompt = torch.randint(0, 32000, (BATCH, PROMPT), device="cuda")
    token = torch.randint(0, 32000, (BATCH, 1), device="cuda")
    with torch.no_grad():
        for _ in range(2):
            model(prompt)                    # cold, then warm prefill
        eager = model(token)                 # decode step 0, eager: the order the graph's kernels get
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static = model(token)            # captured, not run
        for _ in range(2):
            graph.replay()                   # decode steps 1 and 2
    torch.cuda.synchronize()
    print(json.dumps({"replays": 2, "same_as_eager": bool(torch.equal(eager, static))}))


if __name__ == "__main__":
    main()
