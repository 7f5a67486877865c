"""NVTX ranges inside code that torch.compile generated: each kernel inductor writes, and each call
it leaves to a library (a cuBLAS GEMM, an attention kernel), gets the layer, block and role ranges
of the modules that produced it, the same ranges an eager forward gets from the module hooks.

Where they come from: inductor's own provenance record. With provenance tracking on
(`config.trace.provenance_tracking_level`), inductor notes, just before each kernel launch in the
Python wrapper it generates, which post-grad FX nodes the kernel was made from
(`write_provenance_debug_handle`); each node keeps `nn_module_stack`, the path and class of every
module it was traced in, and its tensors' shapes. Beside that note smlens writes one call,
`_smlens_site('layer_0', 'attention_block', 'qkv_proj M=8 N=4096 K=4096 module=... compiled=1')`,
whose ranges are worked out at compile time (`site_ranges`) and stand as literals in the generated
code. At run time the call closes the previous site's ranges and opens its own, inside the phase
that the eager call of the compiled forward opened; the wrapper's return closes them. So ncu's
include filters (`smlens@decode/step_2/layer_0/`) and the ingest read compiled forwards as they read
eager ones, and a CUDA graph captured from the compiled code replays kernels in the order of a run
that had the ranges (nvtx.EagerOrder).

The generated module imports the site function under a guard: loaded where smlens is absent it is a
no-op. An annotated program compiles into caches of smlens's own (annotate.compile_caches): a cache
hit skips the code generation that writes the sites, so a plain run's cache would give code without
them, and inductor's cache keys leave the provenance settings out. Nothing that
dynamo or inductor look up is replaced: three methods of the Python wrapper's code generator write a
line more (functools.wraps keeps their names), and a C++ wrapper is left as it is.

Like runtime.py, this file imports nothing of smlens by package name (the profiled program may have
a `profiler` package of its own); the module-role table comes in as `vocab` (views/vocabulary.py).
"""
from __future__ import annotations

import functools
import re

SITE = "_smlens_site"
_ACTIVE = None                # the Annotator whose phases the sites nest in (enable() sets it)

# aten ops that only describe a view of memory: no work of their own, so a kernel's role is not
# taken from them (a reshape of q_proj's output read by the rotary kernel is no q_proj work)
VIEW_OPS = {"view", "reshape", "_unsafe_view", "permute", "transpose", "t", "expand", "slice",
            "select", "squeeze", "unsqueeze", "alias", "as_strided", "split", "split_with_sizes",
            "unbind", "narrow", "detach", "clone", "contiguous", "view_as", "expand_as", "unflatten"}
GEMM_OPS = {"mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "_int_mm", "_grouped_mm", "linear"}
# a library's own GEMM op, by its name (vLLM's CPU `_C.weight_packed_linear`, `_C.onednn_mm`, a
# quantized `cutlass_scaled_mm` or `marlin_gemm`): its role and N K come from its module and tensors
LIBRARY_GEMM = re.compile(r"(?:^|_)(?:mm|gemm|linear|matmul)(?:$|_)")
# torch's SDPA kernels, and a library's attention op (vLLM's `unified_attention_with_output`)
ATTENTION_OPS = re.compile(r"scaled_dot_product|attention")
_INDEX = re.compile(r"\[['\"]?([^\]'\"]+)['\"]?\]")


def site(*ranges: str) -> None:
    """Called by compiled code before each kernel (no ranges: at the wrapper's return)."""
    annotator = _ACTIVE
    if annotator is not None:
        annotator.compiled_site(ranges)


# --- what a kernel came from ---------------------------------------------------------------------

def module_path(path: str) -> str:
    """Dynamo's module path -> the dotted one: `L['self'].model.layers[0]._modules['mlp']` ->
    `model.layers.0.mlp` (the root, `L['self']` or `L['args'][0]`, dropped)."""
    path = re.sub(r"^L(\[[^\]]*\])+\.?", "", path.strip())
    path = path.replace("._modules", "").replace("_modules", "")
    path = _INDEX.sub(lambda m: "." + m.group(1), path)
    return ".".join(part for part in path.split(".") if part)


def _class_name(cls) -> str:
    name = cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
    return name.rsplit(".", 1)[-1]


def _op_name(node) -> str:
    target = getattr(node, "target", None)
    packet = getattr(target, "overloadpacket", None)
    name = getattr(packet, "__name__", None) or getattr(target, "__name__", None) or str(target)
    return name.split(".")[-1] if "." in name and packet is None else name


def _shape(value) -> tuple | None:
    """A tensor's shape, a symbolic size (the code was compiled for any size) as None."""
    shape = getattr(value, "shape", None)
    return None if shape is None else tuple(size if isinstance(size, int) else None for size in shape)


def _arg_shape(node, index: int) -> tuple | None:
    args = getattr(node, "args", ())
    if index >= len(args):
        return None
    meta = getattr(args[index], "meta", None)
    return _shape(meta.get("val")) if isinstance(meta, dict) else None


def _argument(node, name: str, default=None):
    """An argument of an aten op by its schema name, positional or keyword."""
    if name in getattr(node, "kwargs", {}):
        return node.kwargs[name]
    schema = getattr(getattr(node, "target", None), "_schema", None)
    for i, argument in enumerate(getattr(schema, "arguments", ())):
        if argument.name == name:
            return node.args[i] if i < len(node.args) else default
    return default


def is_gemm(op: str) -> bool:
    return op in GEMM_OPS or bool(LIBRARY_GEMM.search(op))


def gemm_shape(node) -> str:
    """` M=.. N=.. K=..` of a GEMM node (M: rows of all batches); a size compiled symbolic (the
    token count under dynamic shapes) is left out, so M goes and N K stay; '' when N or K are."""
    op = _op_name(node)
    if op in GEMM_OPS:
        a_index = 1 if op in ("addmm", "baddbmm") else 0
        a, b = _arg_shape(node, a_index), _arg_shape(node, a_index + 1)
        if not a or not b or len(a) < 2:
            return ""
        n = b[0] if op == "linear" else b[-1]
    else:
        a, out = _library_gemm_tensors(node)
        if not a or not out:
            return ""
        n = out[-1]
    k = a[-1]
    if not k or not n:
        return ""
    rows = None
    if None not in a:
        rows = 1
        for size in a:
            rows *= size
    return (f" M={rows // k}" if rows is not None else "") + f" N={n} K={k}"


def _library_gemm_tensors(node) -> tuple:
    """(A's shape, the output's) of a library's GEMM op, read from its schema: the output is the
    argument it writes (`weight_packed_linear(out, x, packed_weight, bias, ...)`) or else what it
    returns; A the first tensor of two or more dimensions that it only reads (a packed weight's
    layout is the library's own, so N comes from the output)."""
    schema = getattr(getattr(node, "target", None), "_schema", None)
    written = {i for i, argument in enumerate(getattr(schema, "arguments", ()))
               if getattr(getattr(argument, "alias_info", None), "is_write", False)}
    out = next((_arg_shape(node, i) for i in sorted(written)), None)
    if out is None:
        out = _shape(node.meta.get("val")) if isinstance(getattr(node, "meta", None), dict) else None
    a = next((shape for i in range(len(getattr(node, "args", ()))) if i not in written
              for shape in [_arg_shape(node, i)] if shape and len(shape) >= 2), None)
    return a, (out if out and len(out) >= 2 else None)


def attention_shape(node) -> str:
    """` B= H= KVH= Sq= Skv= D= causal=` of an attention node ([B, H, S, D] query and key); a size
    compiled symbolic (the KV length of decode steps compiled for any length) is left out. A
    library's op on flattened tokens ([T, H, D], T symbolic: vLLM's) gives ` H= KVH= D=`."""
    q, k = _arg_shape(node, 0), _arg_shape(node, 1)
    if q and k and len(q) == len(k) == 3 and q[0] is None and k[0] is None:
        return "".join(f" {key}={value}" for key, value in (("H", q[1]), ("KVH", k[1]), ("D", q[2]))
                       if value is not None)
    if not q or not k or len(q) != 4 or len(k) != 4:
        return ""
    sizes = (("B", q[0]), ("H", q[1]), ("KVH", k[1]), ("Sq", q[2]), ("Skv", k[2]), ("D", q[3]),
             ("causal", int(bool(_argument(node, "is_causal", False)))))
    return "".join(f" {key}={value}" for key, value in sizes if value is not None)


class _NodeInfo:
    __slots__ = ("layer", "block", "role", "path", "op")

    def __init__(self, layer, block, role, path, op):
        self.layer, self.block, self.role, self.path, self.op = layer, block, role, path, op


def node_info(node, vocab, layer_path: re.Pattern) -> _NodeInfo:
    """The layer, block and role one FX node was traced in, from its module stack (outermost first)."""
    chain = [(module_path(path), _class_name(cls))
             for path, cls in (node.meta.get("nn_module_stack") or {}).values()]
    op = _op_name(node)
    layer = block = role = None
    for path, cls in chain:
        found = layer_path.search(path)
        if found:
            layer = int(found.group(1))
        name = path.rsplit(".", 1)[-1]
        word = vocab.MODULE_BLOCKS.get(name)
        if word is None and cls.endswith("Attention"):
            word = "attention"
        elif word is None and cls.endswith("MLP"):
            word = "mlp"
        if word is not None and block == "attention" and word == "attention":
            role = "attention"  # an attention module inside the attention block: the computation itself
        elif word is not None:
            block = word
        named = vocab.MODULE_ROLES.get(name)
        if isinstance(named, dict):
            named = named.get(block)
        if named is None and any(w in cls for w in vocab.ELEMENTWISE_CLASS_WORDS):
            named = "elementwise"
        if named is not None:
            role = named
    if ATTENTION_OPS.search(op):
        role = "attention"
    return _NodeInfo(layer, block, role, chain[-1][0] if chain else "", op)


def site_ranges(kernel_name: str, nodes: list, vocab, layer_path: re.Pattern) -> tuple:
    """The ranges of one launch site: `layer_<i>`, `<block>_block`, the role's message.

    A GEMM or attention node makes the kernel its role, layer and block, with its shapes (an
    extern call inductor leaves to cuBLAS, or a library's own op, keeps its projection's role and
    M N K; its record may list the nodes of its input's kernel too, vLLM's norm before qkv_proj).
    Otherwise the kernel is the one role its nodes share, and `elementwise` when they span several
    (a norm fused with the residual add) or none. Its layer is the last layer among its nodes (the
    residual add of layer i fused into layer i+1's norm belongs to layer i+1: each layer owns one
    such kernel); its block is the one block all its nodes share. The graph's inputs are no work."""
    nodes = [n for n in nodes if getattr(n, "op", None) not in ("placeholder", "get_attr", "output")]
    infos = [node_info(n, vocab, layer_path) for n in nodes]
    working = [i for i in infos if i.op not in VIEW_OPS] or infos
    if not working:
        return ()
    layers = [i.layer for i in working if i.layer is not None]
    layer = max(layers) if layers else None
    blocks = {i.block for i in working}
    block = blocks.pop() if len(blocks) == 1 else None
    label = kernel_label(kernel_name)
    # a library call or a template kernel does its GEMM's or attention's work; a fused kernel that
    # merely lists one among its nodes computes its inputs (the rotary embedding before attention)
    does_work = label != kernel_name or "_tem_" in kernel_name
    primary = next((i for i in working if is_gemm(i.op) or ATTENTION_OPS.search(i.op)), None) \
        if does_work else None
    shape = ""
    if primary is not None:
        node = nodes[infos.index(primary)]
        role = primary.role
        layer = primary.layer if primary.layer is not None else layer
        block = primary.block
        if role == "attention":
            shape = attention_shape(node)
        elif role in vocab.GEMM_ROLES:
            shape = gemm_shape(node)
        elif role is None and layer is not None:
            role = "attention" if block == "attention" else None  # eager attention's own matmuls
        path = primary.path
    else:
        roles = {i.role for i in working if i.role is not None}
        role = roles.pop() if len(roles) == 1 else "elementwise"
        paths = [i.path for i in working if i.path]
        path = _common_path(paths)
    if role is None:  # a GEMM outside any projection (a router, lm_head): the name classifier's
        return (f"layer_{layer}",) if layer is not None else ()
    ranges = [f"layer_{layer}"] if layer is not None else []
    if block is not None and layer is not None:
        ranges.append(f"{block}_block")
    ranges.append(f"{role}{shape} {vocab.ANNOTATION_KEY}={path or '-'} {vocab.COMPILED_KEY}=1 kernel={label}")
    return tuple(ranges)


def kernel_label(kernel_name: str) -> str:
    """`extern_kernels.mm` -> `mm`, `torch.ops.aten._scaled_dot_product_flash_attention.default` ->
    `aten._scaled_dot_product_flash_attention`; a generated kernel's name as it is."""
    for prefix in ("extern_kernels.", "torch.ops."):
        if kernel_name.startswith(prefix):
            return kernel_name[len(prefix):].removesuffix(".default")
    return kernel_name


def _common_path(paths: list[str]) -> str:
    if not paths:
        return ""
    parts = [p.split(".") for p in paths]
    common = []
    for column in zip(*parts):
        if len(set(column)) != 1:
            break
        common.append(column[0])
    return ".".join(common)


# --- writing the sites into inductor's wrapper ---------------------------------------------------

HEADER = f"""
try:
    from {{module}} import site as {SITE}
except ImportError:  # smlens absent: code from a cache that an annotated process filled
    def {SITE}(*ranges):
        pass
"""


def enable(annotator, vocab, layer_path: re.Pattern) -> str:
    """Turn on provenance tracking and the site lines; returns 'on' or why not ('unavailable: ...')."""
    global _ACTIVE
    try:
        import torch._inductor.config as config
        import torch._inductor.debug as debug
        from torch._inductor.codegen import wrapper
        from torch._inductor.virtualized import V
    except Exception as err:  # noqa: BLE001 - an inductor this code does not know
        return f"unavailable: {type(err).__name__}: {err}"
    codegen = getattr(wrapper, "PythonWrapperCodegen", None)
    needed = ("write_provenance_debug_handle", "write_header", "generate_return")
    if (codegen is None or not hasattr(config.trace, "provenance_tracking_level")
            or not all(hasattr(codegen, m) for m in needed)):
        return "unavailable: this torch's inductor has no provenance tracking"
    if getattr(codegen.write_header, "_smlens", False):
        _ACTIVE = annotator
        return "on"
    if not config.trace.provenance_tracking_level:
        config.trace.provenance_tracking_level = 2  # basic: kernels -> post-grad nodes
    header = HEADER.format(module=__name__)
    graphs: dict = {}   # id(graph lowering) -> (it, {node name: node})

    def python(wrapper_code) -> bool:
        """A Python wrapper whose module (its own, or a partition's parent's) has the header."""
        while wrapper_code is not None:
            if getattr(wrapper_code, "_smlens_header", False):
                return not getattr(V.graph, "cpp_wrapper", False)
            wrapper_code = getattr(wrapper_code, "parent_wrapper", None)
        return False

    def nodes_of(names) -> list:
        graph = V.graph
        held = graphs.get(id(graph))
        if held is None or held[0] is not graph:
            graphs.clear()
            held = graphs[id(graph)] = (graph, {n.name: n for n in graph.graph.nodes})
        return [held[1][name] for name in names if name in held[1]]

    original_header = codegen.write_header

    @functools.wraps(original_header)
    def write_header(self):
        original_header(self)
        if getattr(self, "comment", None) == "#" and type(self).write_header is write_header:
            self.imports.splice(header)
            self._smlens_header = True

    original_handle = codegen.write_provenance_debug_handle

    @functools.wraps(original_handle)
    def write_provenance_debug_handle(self, kernel_name, debug_handle=None):
        original_handle(self, kernel_name, debug_handle)
        if debug_handle is None or not python(self):
            return
        try:
            names = debug._inductor_triton_kernel_to_post_grad_node_info.get(f"{kernel_name}:{debug_handle}", [])
            ranges = site_ranges(str(kernel_name), nodes_of(names), vocab, layer_path)
        except Exception:  # noqa: BLE001 - a site left out: its kernel keeps the phase alone
            ranges = ()
        self.writeline(f"{SITE}({', '.join(map(repr, ranges))})")

    original_return = codegen.generate_return

    @functools.wraps(original_return)
    def generate_return(self, output_refs):
        if python(self):
            self.wrapper_call.writeline(f"{SITE}()")
        return original_return(self, output_refs)

    for method in (write_header, write_provenance_debug_handle, generate_return):
        method._smlens = True
        setattr(codegen, method.__name__, method)
    _suspend_while_benchmarking()
    _ACTIVE = annotator
    return "on"


def _suspend_while_benchmarking() -> None:
    """Inductor's autotuner runs a generated kernel's candidate configurations at its first call
    (`CachingAutotuner.bench`, with an L2 flush before each): no smlens range is open meanwhile, so
    ncu's filters profile the program's launches only (seen on the H200: 568 flushes and 27 extra
    runs of one layer's kernels under its ranges)."""
    try:
        from torch._inductor.runtime import triton_heuristics
    except Exception:  # noqa: BLE001 - no triton: nothing is benchmarked
        return
    autotuner = getattr(triton_heuristics, "CachingAutotuner", None)
    original = getattr(autotuner, "bench", None)
    if original is None or getattr(original, "_smlens", False):
        return

    @functools.wraps(original)
    def bench(self, *args, **kwargs):
        annotator = _ACTIVE
        if annotator is None:
            return original(self, *args, **kwargs)
        with annotator.ranges_suspended():
            return original(self, *args, **kwargs)

    bench._smlens = True
    autotuner.bench = bench
