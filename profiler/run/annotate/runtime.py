"""NVTX ranges for an unmodified PyTorch program, from torch's global module hooks.

`boot/sitecustomize.py` loads this file into the profiled program before the program's own code
runs; once the program imports torch, `Annotator.install` adds one global forward pre-hook and one
forward hook (torch.nn.modules.module.register_module_forward_*_hook); inside attention and
experts modules a TorchFunctionMode reads the calls no hook sees (`_function_mode`), and code that
torch.compile generates opens the same ranges itself (compiled.py). The ranges, in the `smlens` NVTX domain, have
the built-in decoder's structure (profiler/workloads/decoder.py), so the same ncu include filters
(`smlens@cold_prefill/layer_0/`) and the same ingest (profiler/ingest/nvtx.py) serve both:

    cold_prefill | warm_prefill | decode / step_<j>     a forward of a model: the outermost call of a
                                                        module that owns decoder layers
      layer_<i>                                         a decoder layer (`model.layers.3`: i = 3)
        attention_block | mlp_block                     the layer's attention and MLP modules
          <role> M= N= K= module=<path>                 a projection named in MODULE_ROLES
          attention B= H= KVH= Sq= Skv= D= causal= module=<path>   torch's SDPA, or an attention module
          elementwise module=<path>                     a norm, the rotary embedding, an activation
          <role> M= N= K= [experts=E] module=<path>.<param>   a GEMM of a mixture-of-experts module's
                                                        3-D weights (see _function_mode)

A forward that feeds more than one new token per sequence is a prefill (the process's first one
cold, later ones warm), one token per sequence is a decode step (numbered across the process).
`module=` marks the ranges as the annotation's (role_source `annotation` at ingest). Modules the
table does not name push nothing: their kernels get the kernel-name classifier's role.

With SMLENS_STOP_AFTER (`cold_prefill`, `warm_prefill`, `decode:<step>`, comma-separated: what the
current ncu run profiles last) the process ends with exit code 0 as soon as the forward that meets
the last target returns: nothing after it would be profiled. It is the first process to run torch
under the tool that takes the targets (a `python3` launcher passes them on, a worker it starts
does not get them).

No harm: the hooks never change a module's inputs or outputs, read only tensor shapes (never values,
except the positions of a flattened batch, see `_tokens_per_sequence`), push nothing inside
torch.compile's tracing or a CUDA-graph capture's forward, replace no torch function (inductor
names its extern kernels after the functions it finds there), and turn themselves off on any
internal error. With no NVTX tool attached (`domain` None) nothing is installed at all.

This file imports nothing of smlens by package name: the profiled program may have a `profiler`
package of its own. The module-role table comes in as `vocab` (views/vocabulary.py).
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import re
import threading
import weakref
from typing import NamedTuple

DOMAIN = "smlens"
STOP_ENV = "SMLENS_STOP_AFTER"
_MAX_MESSAGES = 20000  # cached event attributes; a program with ever-new shapes starts over

# what a module is to the annotation
_NONE, _OWNER, _LAYER, _BLOCK, _PROJECTION, _ATTENTION, _ELEMENTWISE, _EXPERTS = range(8)
# attributes that make two decoder layers with the same modules run different kernels or work
# (Gemma's sliding-window layers, Llama 4's layers without RoPE)
_LAYER_ATTRIBUTES = ("sliding_window", "is_sliding", "attention_type", "layer_type", "use_rope")


class _Info:
    __slots__ = ("kind", "path", "word", "out_features", "heads", "kv_heads", "head_dim", "params")

    def __init__(self, kind, path="", word="", out_features=None, heads=None, kv_heads=None,
                 head_dim=None, params=None):
        self.kind, self.path, self.word = kind, path, word
        self.out_features = out_features
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.params = params  # _EXPERTS: {parameter name: role}


_SKIP = _Info(_NONE)


class _ExpertWeight(NamedTuple):
    """One 3-D weight of an experts module, as a call of it found it."""
    role: str
    path: str          # `model.layers.0.mlp.experts.gate_up_proj`
    storage: int       # its storage's address: a view of it has the same
    matrix: tuple      # one expert's matrix shape: a gather of its matrices has the same
    experts: int


class _Record:
    """What one annotated module call pushed, popped by its forward hook."""
    __slots__ = ("pushed", "path", "model", "reopen_setup", "capturing", "experts", "mode", "phase")

    def __init__(self, path):
        self.pushed, self.path, self.model = 0, path, False
        self.reopen_setup, self.capturing = False, False
        self.experts = None  # an experts module's call: its _ExpertWeight list
        self.mode = None     # an attention or experts module's call: the function mode entered around it
        self.phase = None    # a model forward's phase, once known


class _Thread(threading.local):
    def __init__(self):
        self.records: list = []
        self.model: _Record | None = None   # the open model forward
        self.pending: _Record | None = None  # a model forward whose phase is not yet known
        self.setup_open = False
        self.site: tuple = ()   # the ranges a compiled site opened (compiled_site)
        self.stack: list = []   # the messages of every range this thread has open, outermost first


def _first_int(module, *names):
    for name in names:
        value = getattr(module, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


class Annotator:
    """The hooks and their state. `domain` has push_range(attributes), pop_range() and
    get_event_attributes(message=...) (the `nvtx` package's Domain, or a test's recorder)."""

    def __init__(self, vocab, domain=None, setup: bool = False, status_path: str | None = None,
                 stop_after: str | None = None):
        self.vocab = vocab
        self.domain = domain
        self.setup = setup and domain is not None
        self.status_path = status_path
        self.forwards = dict.fromkeys(vocab.PHASES, 0)
        self.models: list[dict] = []
        self.compiled_forwards: dict[str, int] = {}   # per phase: forwards run through torch.compile
        self.compiled_annotation: str | None = None    # ranges inside compiled code: on, or why not
        self.graph_replays: dict[str, int] = {}        # per phase: CUDA graphs replayed inside forwards
        self._mode_class = None
        self.error: str | None = None
        self.stopped: str | None = None   # the targets met when the program was ended
        # what this ncu run profiles last (`cold_prefill`, `warm_prefill`, `decode:<step>`): once
        # all have run, the process ends (see _stop_if_done)
        self._stop_after = [t for t in (stop_after or "").split(",") if t]
        self._stop_pid = os.getpid()
        self._exit = os._exit
        self.torch_imported = False
        self.nvtx_package = True   # boot() says whether the program's Python has it
        self._decode_step = 0
        self._info: dict[int, _Info] = {}
        self._attributes: dict[str, object] = {}
        self._thread = _Thread()
        self._lock = threading.Lock()
        self._graph_phases: dict = {}   # id(CUDA graph) -> the phase its captured forward was
        self._captured_phase = None
        self._undo: list = []
        self._layer_path = re.compile(rf"(?:^|\.)(?:{'|'.join(map(re.escape, vocab.LAYER_LISTS))})\.(\d+)$")
        self._gemm_roles = set(vocab.GEMM_ROLES)

    # --- installing --------------------------------------------------------------------------

    def install(self, torch) -> "Annotator":
        """The hooks and wrappers, when an NVTX tool is attached: with none there is nothing to
        annotate, and nothing is installed (a module call then costs what it costs without smlens)."""
        self.torch_imported = True
        self._torch = torch
        if self.domain is None:
            self.write_status()
            return self
        self._compiling = torch.compiler.is_compiling
        if self._stop_after:
            # the first process that runs torch under the tool is the one to end: it takes the
            # targets out of the environment, so a process it starts (a worker its parent waits
            # for) runs on, while a launcher without torch (a `python3` shim) passes them on
            os.environ.pop(STOP_ENV, None)
            self._stop_pid = os.getpid()
        from torch.nn.modules import module as module_mod
        self._mode_class = self._function_mode(torch)
        pre = module_mod.register_module_forward_pre_hook(self._pre)
        post = module_mod.register_module_forward_hook(self._post, always_call=True)
        self._undo += [pre.remove, post.remove]
        self._wrap_cuda_graph(torch)
        self._wrap_compile(torch)
        if self.setup:
            self._open_setup()
        self.write_status()
        return self

    def remove(self) -> None:
        """Undo install (tests)."""
        for undo in reversed(self._undo):
            undo()
        self._undo = []
        self._close_all()

    def _function_mode(self, torch):
        """A TorchFunctionMode entered around each eager call of an attention or experts module: it
        sees the calls the module hooks cannot, and nothing global is replaced (inductor names the
        extern kernels it makes after the functions it finds on torch, so a wrapper there breaks
        compiling):
        - `F.scaled_dot_product_attention`: an attention range with the shapes of its query and key;
        - inside a mixture-of-experts module keeping its experts' weights as 3-D parameters (Hugging
          Face's `MixtralExperts`: `gate_up_proj` [E, 2I, H], `down_proj` [E, H, I]), its GEMMs, which
          are function calls, not modules: `torch._grouped_mm` over all experts (transformers'
          default at prefill), `torch.bmm` over the experts' weights gathered per (token, expert)
          pair (its default for decode on a GPU) or `F.linear` per expert. A GEMM whose weight is one
          of those parameters (a view of it, or a gather of its matrices: the same trailing shape)
          gets the parameter's role range, M the rows it multiplies (tokens x experts per token)."""
        from torch.overrides import TorchFunctionMode

        functional = torch.nn.functional
        sdpa = functional.scaled_dot_product_attention
        batched = {getattr(owner, name): name == "bmm"
                   for owner, name in ((functional, "linear"), (torch, "_grouped_mm"), (torch, "bmm"))
                   if getattr(owner, name, None) is not None}
        annotator = self

        class AnnotationMode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if annotator._compiling() or annotator.error is not None:
                    return func(*args, **kwargs)
                if func is sdpa:
                    return annotator._attention_call(func, args, kwargs)
                if func in batched:
                    return annotator._expert_gemm_call(func, args, kwargs, batched[func])
                return func(*args, **kwargs)

        # a module-level name, so a tool that pickles what it finds (vLLM's compile cache) can
        AnnotationMode.__qualname__ = AnnotationMode.__name__
        AnnotationMode.__module__ = __name__
        globals()[AnnotationMode.__name__] = AnnotationMode
        return AnnotationMode

    def _attention_call(self, func, args, kwargs):
        model = self._thread.model
        if model is None or model.capturing or len(args) < 2:
            return func(*args, **kwargs)
        mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
        causal = kwargs.get("is_causal", args[5] if len(args) > 5 else False)
        pushed = self._push_attention(args[0], args[1], mask, causal)
        try:
            return func(*args, **kwargs)
        finally:
            if pushed:
                self._pop()

    def _expert_gemm_call(self, func, args, kwargs, batched: bool):
        records = self._thread.records
        experts = records[-1].experts if records else None
        if experts is None or len(args) < 2:
            return func(*args, **kwargs)
        pushed = self._push_expert_gemm(experts, args[0], args[1], batched)
        try:
            return func(*args, **kwargs)
        finally:
            if pushed:
                self._pop()

    @staticmethod
    def _expert_weight(experts: list, tensor) -> _ExpertWeight | None:
        """The expert weight `tensor` is taken from: the same storage, else (a gather) the one weight
        of the same matrix shape, either way round."""
        if getattr(tensor, "dim", lambda: 0)() < 2:
            return None
        storage = tensor.untyped_storage().data_ptr()
        same = [e for e in experts if e.storage == storage]
        if not same:
            shape = tuple(tensor.shape[-2:])
            same = [e for e in experts if shape in (e.matrix, e.matrix[::-1])]
        return same[0] if len(same) == 1 else None

    def _push_expert_gemm(self, experts: list, a, b, batched: bool) -> bool:
        """linear / grouped_mm (x, W): K is x's last dim; bmm(W, x) or bmm(x, W): K is a's last dim."""
        try:
            found = self._expert_weight(experts, b)
            weight, other = b, a
            if found is None and batched:
                found = self._expert_weight(experts, a)
                weight, other = a, b
            if found is None:
                return False
            k = int(a.shape[-1])
            rows, cols = (int(v) for v in weight.shape[-2:])
            n = rows if (batched and weight is a) or cols == k else cols
            grouped = f" experts={found.experts}" if weight.dim() == 3 and not batched else ""
            self._push(f"{found.role} M={other.numel() // k} N={n} K={k}{grouped} module={found.path}")
            return True
        except (AttributeError, IndexError, TypeError, ValueError, RuntimeError, ZeroDivisionError):
            return False  # an odd call (no shapes to read) goes unannotated

    def _wrap_eager_attention(self, module) -> None:
        """Hugging Face's eager attention (Gemma-2's default since transformers 5.18: SDPA has no
        softcap) is the module-level `eager_attention_forward(module, query, key, value, mask, ...)`
        of the attention class's modeling file, looked up at each call: wrapped there, its matmuls,
        softcap and softmax run in an attention range with the shapes, as SDPA's kernels do."""
        import sys
        source = sys.modules.get(type(module).__module__)
        original = getattr(source, "eager_attention_forward", None)
        if not callable(original) or getattr(original, "_smlens_wrapped", False):
            return
        annotator = self

        def eager_attention_forward(attention, query, key, value, *args, **kwargs):
            model = annotator._thread.model
            if annotator._compiling() or annotator.error is not None or model is None or model.capturing:
                return original(attention, query, key, value, *args, **kwargs)
            mask = kwargs.get("attention_mask", args[0] if args else None)
            # the causal mask comes as `mask` (eager attention has no is_causal)
            pushed = annotator._push_attention(query, key, mask, False)
            try:
                return original(attention, query, key, value, *args, **kwargs)
            finally:
                if pushed:
                    annotator._pop()

        eager_attention_forward.__wrapped__ = original
        eager_attention_forward._smlens_wrapped = True
        eager_attention_forward.__doc__ = original.__doc__
        source.eager_attention_forward = eager_attention_forward
        self._undo.append(lambda: setattr(source, "eager_attention_forward", original))

    def _wrap_compile(self, torch) -> None:
        """torch.compile as before (its name and attributes kept), and also:
        - the first call turns on the ranges inside compiled code (compiled.py): layers, blocks and
          roles of every kernel inductor generates or leaves to a library, role_source `compiled`;
        - a model's forward compiled as a function (`torch.compile(model.forward)`, or Hugging Face's
          `torch.compile(model.__call__)` for a static cache's decode steps) is wrapped so that its
          call, made eagerly, opens the forward's phase and decode step, from `input_ids` /
          `inputs_embeds` or the first tensor argument: inside it dynamo traces the module hooks
          away. A compiled module (`torch.compile(model)`) is called as a module: its pre-hook opens
          the phase."""
        original = torch.compile
        annotator = self

        @functools.wraps(original)
        def compile(model=None, *args, **kwargs):
            if model is None:  # @torch.compile(mode=...)
                return lambda fn: compile(fn, *args, **kwargs)
            annotator._annotate_compiled()
            compiled = original(model, *args, **kwargs)
            owner = getattr(model, "__self__", None)
            if not isinstance(owner, torch.nn.Module) or annotator.error is not None:
                return compiled
            info = annotator._info.get(id(owner)) or annotator._learn(owner)
            if info.kind != _OWNER:
                return compiled

            @functools.wraps(compiled)  # and its attributes (dynamo's own marks)
            def compiled_forward(*call_args, **call_kwargs):
                return annotator._compiled_forward(compiled, call_args, call_kwargs)

            return compiled_forward

        torch.compile = compile
        self._undo.append(lambda: setattr(torch, "compile", original))

    def _annotate_compiled(self) -> None:
        if self.compiled_annotation is None and self.domain is not None:
            try:
                self.compiled_annotation = _sibling("compiled").enable(self, self.vocab, self._layer_path)
            except Exception as err:  # noqa: BLE001 - compiled forwards keep their phases alone
                self.compiled_annotation = f"unavailable: {type(err).__name__}: {err}"
            self.write_status()

    def _compiled_forward(self, compiled, args, kwargs):
        state = self._thread
        if self._compiling() or self.error is not None:
            return compiled(*args, **kwargs)
        given = [kwargs.get(k) for k in ("input_ids", "inputs_embeds")]
        tensors = [t for t in given if t is not None] + list(args)
        if state.model is not None:
            # the model's own call opened the forward (a compiled `model.forward`); its keyword
            # arguments, which the pre-hook does not see, give the phase
            if state.pending is not None:
                self._start_forward(state, tensors)
            self._count_compiled(state.model.phase)
            return compiled(*args, **kwargs)
        record = _Record("")
        try:
            state.records.append(record)
            self._open_forward(state, record, ())
            self._start_forward(state, tensors)
            self._count_compiled(record.phase)
        except Exception as err:  # noqa: BLE001
            self._fail(err)
        try:
            return compiled(*args, **kwargs)
        finally:
            if self.error is None and state.records and state.records[-1] is record:
                state.records.pop()
                self._pop_record(state, record)
                self._close_forward(state, record)

    def _count_compiled(self, phase: str | None) -> None:
        if phase is not None:
            with self._lock:
                self.compiled_forwards[phase] = self.compiled_forwards.get(phase, 0) + 1

    def compiled_site(self, ranges: tuple) -> None:
        """Compiled code is about to launch a kernel of these ranges (compiled.py); () closes them.
        They open inside the phase of the forward running, and only there."""
        state = self._thread
        model = state.model
        if (self.error is not None or model is None or model.capturing or state.pending is not None
                or ranges == state.site):
            return
        try:
            self._close_site(state)
            for message in ranges:
                self._push(message)
            state.site = ranges
        except Exception as err:  # noqa: BLE001
            self._fail(err)

    def _close_site(self, state: "_Thread") -> None:
        for _ in state.site:
            self._pop()
        state.site = ()

    def _pop_record(self, state: "_Thread", record: "_Record") -> None:
        """Pop what a module call pushed (a compiled site's ranges above it first)."""
        self._close_site(state)
        self._exit_mode(record)
        for _ in range(record.pushed):
            self._pop()

    def _wrap_cuda_graph(self, torch) -> None:
        """A CUDA graph captured around a model forward gets that forward's phase (and a decode step
        number) as ranges around each replay: its kernels lose the ranges of capture, and the eager
        order then names them (nvtx.EagerOrder)."""
        graph_class = getattr(getattr(torch, "cuda", None), "CUDAGraph", None)
        if graph_class is None:
            return
        capture_end, replay = graph_class.capture_end, graph_class.replay
        annotator = self

        def wrapped_capture_end(graph):
            capture_end(graph)
            phase, annotator._captured_phase = annotator._captured_phase, None
            if phase is not None:
                annotator._graph_phases[id(graph)] = phase
                weakref.finalize(graph, annotator._graph_phases.pop, id(graph), None)

        def wrapped_replay(graph):
            phase = annotator._graph_phases.get(id(graph))
            model = annotator._thread.model
            if model is not None and model.phase is not None:
                # a graph replayed inside a forward (torch.compile's CUDA graphs): no layer ranges
                with annotator._lock:
                    annotator.graph_replays[model.phase] = annotator.graph_replays.get(model.phase, 0) + 1
            if phase is None or model is not None:
                return replay(graph)
            setup = annotator._close_setup()
            pushed = annotator._push_phase(phase)
            try:
                return replay(graph)
            finally:
                for _ in range(pushed):
                    annotator._pop()
                if setup:
                    annotator._open_setup()
                annotator._stop_if_done()

        graph_class.capture_end, graph_class.replay = wrapped_capture_end, wrapped_replay

        def undo():
            graph_class.capture_end, graph_class.replay = capture_end, replay
        self._undo.append(undo)

    # --- ranges ------------------------------------------------------------------------------

    def _push(self, message: str) -> None:
        self.domain.push_range(self._attributes_of(message))
        self._thread.stack.append(message)

    def _pop(self) -> None:
        self.domain.pop_range()
        if self._thread.stack:
            self._thread.stack.pop()

    def _attributes_of(self, message: str):
        attributes = self._attributes.get(message)
        if attributes is None:
            if len(self._attributes) > _MAX_MESSAGES:
                self._attributes.clear()
            attributes = self._attributes[message] = self.domain.get_event_attributes(message=message)
        return attributes

    @contextlib.contextmanager
    def ranges_suspended(self):
        """No smlens range open on this thread for a while: inductor benchmarking the launch
        configurations of a kernel it generated runs it (and flushes the L2) dozens of times at the
        kernel's first call, inside its site's ranges; those launches are not the program's and no
        include filter may match them (compiled.py)."""
        stack = list(self._thread.stack) if self.domain is not None else []
        for _ in stack:
            self.domain.pop_range()
        try:
            yield
        finally:
            for message in stack:
                self.domain.push_range(self._attributes_of(message))

    def _open_setup(self) -> None:
        main = threading.current_thread() is threading.main_thread()
        if self.setup and main and not self._thread.setup_open:
            self._push(self.vocab.SETUP_PHASE)
            self._thread.setup_open = True

    def _close_setup(self) -> bool:
        """Close the setup range (phases are outermost, as ncu's include filters expect)."""
        if not self._thread.setup_open:
            return False
        self._pop()
        self._thread.setup_open = False
        return True

    def _push_phase(self, phase: str) -> int:
        """The phase range, and a decode step's: how many were pushed."""
        self._push(phase)
        if phase != "decode":
            return 1
        with self._lock:
            step, self._decode_step = self._decode_step, self._decode_step + 1
        self._push(f"step_{step}")
        return 2

    def _push_attention(self, query, key, mask, causal) -> bool:
        """The attention range of one SDPA or eager-attention call, from its query and key:
        [B, H, S, D] (or [H, S, D])."""
        try:
            batch, heads, q_len, head_dim = (int(v) for v in query.shape[-4:]) if query.dim() == 4 \
                else (1, *(int(v) for v in query.shape[-3:]))
            kv_heads, kv_len = int(key.shape[-3]), int(key.shape[-2])
            # a mask at Sq > 1 in a decoder's forward is the causal mask (Hugging Face passes one
            # when padding or a cache offset rules out is_causal)
            causal = bool(causal) or (mask is not None and q_len > 1)
            records = self._thread.records
            path = records[-1].path if records else ""
            self._push(f"attention B={batch} H={heads} KVH={kv_heads} Sq={q_len} Skv={kv_len} "
                       f"D={head_dim} causal={int(causal)} module={path}")
            return True
        except (AttributeError, IndexError, TypeError, ValueError):
            return False  # an odd call (no shapes to read) goes unannotated

    # --- the hooks -----------------------------------------------------------------------------

    def _pre(self, module, args):
        if self._compiling() or self.error is not None:
            return None
        try:
            state = self._thread
            if state.pending is not None and args:
                self._start_forward(state, args)
            info = self._info.get(id(module))
            if info is None:
                if state.model is not None:
                    return None  # a module no model walk saw, inside a forward
                info = self._learn(module)
            if info.kind == _NONE:
                return None
            record = _Record(info.path)
            state.records.append(record)
            if info.kind == _OWNER:
                if state.model is None:
                    args = args or self._call_keywords(module)  # vLLM's runner calls its model by keyword
                    self._open_forward(state, record, args)
            elif state.model is not None and not state.model.capturing:
                self._close_site(state)  # eager code between two compiled graphs
                self._push_module(info, record, args, module)
        except Exception as err:  # noqa: BLE001
            self._fail(err)
        return None

    def _post(self, module, args, output):
        if self._compiling() or self.error is not None:
            return None
        try:
            info = self._info.get(id(module))
            if info is None or info.kind == _NONE:
                return None
            state = self._thread
            if not state.records:
                return None
            record = state.records.pop()
            self._pop_record(state, record)
            if record.model:
                self._close_forward(state, record)
        except Exception as err:  # noqa: BLE001
            self._fail(err)
        return None

    def _push_module(self, info: _Info, record: _Record, args, module) -> None:
        if info.kind in (_EXPERTS, _ATTENTION) or info.kind == _BLOCK and info.word == "attention":
            # where SDPA and the experts' GEMMs are called; only there, so that dynamo never finds
            # the mode when it traces a compiled forward that an eager one calls (vLLM's)
            record.mode = self._mode_class()
            record.mode.__enter__()
        if info.kind == _EXPERTS:
            # no range of its own: its GEMMs push theirs (_function_mode), its other kernels
            # (routing, gathers) are the MLP block's, roles from their names
            record.experts = []
            for name, role in info.params.items():
                weight = getattr(module, name)
                record.experts.append(_ExpertWeight(role, f"{info.path}.{name}", weight.untyped_storage().data_ptr(),
                                                    tuple(weight.shape[-2:]), int(weight.shape[0])))
            return
        if info.kind == _LAYER:
            self._push(info.word)
        elif info.kind == _BLOCK:
            self._push(f"{info.word}_block")
        elif info.kind == _PROJECTION:
            shape = ""
            x = args[0] if args else None
            if x is not None and hasattr(x, "shape") and x.dim() >= 1 and info.out_features:
                k = int(x.shape[-1])
                if k:
                    shape = f" M={x.numel() // k} N={info.out_features} K={k}"
            self._push(f"{info.word}{shape} module={info.path}")
        elif info.kind == _ATTENTION:
            parts = [f"{key}={value}" for key, value in
                     (("H", info.heads), ("KVH", info.kv_heads), ("D", info.head_dim)) if value]
            self._push(" ".join(["attention", *parts, f"module={info.path}"]))
        else:  # _ELEMENTWISE
            self._push(f"elementwise module={info.path}")
        record.pushed = 1

    def _open_forward(self, state: _Thread, record: _Record, args) -> None:
        record.model = True
        state.model = record
        torch = self._torch
        record.capturing = bool(torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing())
        record.reopen_setup = self._close_setup()
        state.pending = record
        if args:
            self._start_forward(state, args)

    def _start_forward(self, state: _Thread, args) -> str | None:
        """The phase of the pending forward, from the first tensor a call in it receives."""
        tokens = self._tokens_per_sequence(args, state.pending.capturing)
        if tokens is None:
            return None
        record, state.pending = state.pending, None
        if not record.capturing and self._start_up_forward():
            record.capturing = True  # as in a capture: nothing inside it is pushed, nor counted
            return None
        with self._lock:
            if tokens == 1:
                phase = "decode"
            else:
                phase = "warm_prefill" if self.forwards["cold_prefill"] else "cold_prefill"
            if record.capturing:  # replays run it: the phase goes with the graph
                self._captured_phase = phase
                return phase
            self.forwards[phase] += 1
            first = self.forwards[phase] == 1
        record.phase = phase
        record.pushed = self._push_phase(phase)
        if first:
            self.write_status()
        return phase

    def _start_up_forward(self) -> bool:
        """Whether the forward now starting is one an engine runs before any request (vLLM's memory
        profiling and warm-up `_dummy_run`s): a function of vocab.START_UP_FORWARDS on the stack. It
        gets no phase, so it is neither profiled nor counted as the cold prefill. Once per forward."""
        import sys
        names = self.vocab.START_UP_FORWARDS
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_name in names:
                return True
            frame = frame.f_back
        return False

    @staticmethod
    def _call_keywords(module) -> tuple:
        """The arguments a module was called with by keyword (`model(input_ids=..., positions=...)`),
        ids or embeddings first: torch's global pre-hooks get only the positional ones, so they are
        read from the frame of torch's Module._call_impl running the hooks; () where not found."""
        import sys
        frame = sys._getframe(2)
        for _ in range(4):  # _call_impl is the hook's caller; a wrapper may sit in between
            if frame is None:
                break
            local = frame.f_locals
            kwargs = local.get("kwargs")
            if local.get("self") is module and isinstance(kwargs, dict):
                first = [kwargs[k] for k in ("input_ids", "inputs_embeds") if kwargs.get(k) is not None]
                return (*first, *(v for k, v in kwargs.items() if k not in ("input_ids", "inputs_embeds")))
            frame = frame.f_back
        return ()

    def _tokens_per_sequence(self, args, capturing: bool) -> int | None:
        torch = self._torch
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not tensors:
            return None
        x = tensors[0]
        if x.is_floating_point():       # hidden states: [B, S, H] or flattened [T, H]
            if x.dim() == 3:
                return int(x.shape[1])
            flat = x.dim() == 2
        else:                           # token ids: [B, S] or flattened [T]
            if x.dim() == 2:
                return int(x.shape[1])
            flat = x.dim() == 1
        if not flat:
            return None
        if x.shape[0] <= 1:
            return 1
        # A flattened batch (vLLM): positions, the next integer tensor of the same length, step by
        # one inside a sequence's new tokens. Reading them syncs, so not while a graph captures
        # (vLLM captures decode batches only).
        positions = next((t for t in tensors[1:] if not t.is_floating_point() and t.dim() == 1
                          and t.shape[0] == x.shape[0]), None)
        if positions is None or capturing:
            return 1
        runs = bool((positions[1:] - positions[:-1] == 1).any())
        return 2 if runs else 1

    def _close_forward(self, state: _Thread, record: _Record) -> None:
        state.model = None
        state.pending = None
        if record.reopen_setup:
            self._open_setup()
        self._stop_if_done()

    def _stop_if_done(self) -> None:
        """End the process once the forwards this ncu run profiles have all run: what follows
        (later forwards, the program's teardown) would profile nothing and only cost time. smlens
        plans it only where no later forward can match the run's filters, and only in the process
        it started (a child or a fork of it runs on)."""
        if not self._stop_after or os.getpid() != self._stop_pid:
            return
        for target in self._stop_after:
            phase, _, step = target.partition(":")
            done = self._decode_step > int(step) if step else self.forwards.get(phase, 0) > 0
            if not done:
                return
        self.stopped = ",".join(self._stop_after)
        self.write_status()
        torch = self._torch
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()  # the profiled kernels are done; let the rest finish too
        import sys
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (AttributeError, OSError, ValueError):
                pass
        # exit code 0 at once: the program's own exit handlers and teardown (freeing a model's
        # memory) are skipped, ncu keeps every kernel it profiled
        self._exit(0)

    # --- learning a model's modules --------------------------------------------------------------

    def _learn(self, module) -> _Info:
        """A module first called outside any forward: if it owns decoder layers, every module of
        it is told what it is (once); else it is skipped from now on."""
        named = list(module.named_modules())
        layers = {}
        for path, child in named:
            match = self._layer_path.search(path)
            if match and not any(path.startswith(p + ".") for p in layers):
                layers[path] = int(match.group(1))
        if not layers:
            self._remember(module, _SKIP)
            return _SKIP
        roles = {path: self._role(path, child, named) for path, child in named}
        modules = dict(named)
        projections = [p for p, (kind, _) in roles.items() if kind == _PROJECTION]
        for path, child in named:
            if path in layers:
                info = _Info(_LAYER, path, f"layer_{layers[path]}")
            elif not path or any(layer.startswith(path + ".") for layer in layers):
                info = _Info(_OWNER, path)
            else:
                kind, word = roles[path]
                if kind == _BLOCK and word == "attention":
                    if not any(p.startswith(path + ".") for p in projections):
                        kind = _ATTENTION  # the attention computation itself (vLLM's Attention)
                    else:
                        self._wrap_eager_attention(child)
                info = self._describe(kind, path, word, child)
            self._remember(child, info)
        kinds: dict = {}
        for path, index in sorted(layers.items(), key=lambda item: item[1]):
            kinds.setdefault(self._layer_signature(modules[path]), []).append(index)
        with self._lock:
            self.models.append({"class": type(module).__name__, "layers": len(layers),
                                "layer_kinds": list(kinds.values())})
        return self._info[id(module)]

    @staticmethod
    def _layer_signature(layer) -> tuple:
        """What makes a decoder layer run the kernels it does: its modules' classes, their weights'
        shapes and the attributes in _LAYER_ATTRIBUTES. Layers with equal signatures are alike
        (what dedup's one profiled layer stands for); a model may mix kinds (dense and
        mixture-of-experts layers, sliding-window and global attention)."""
        return tuple((path, type(child).__name__,
                      tuple((name, tuple(p.shape)) for name, p in child.named_parameters(recurse=False)),
                      tuple(str(getattr(child, a, None)) for a in _LAYER_ATTRIBUTES))
                     for path, child in layer.named_modules())

    def _remember(self, module, info: _Info) -> None:
        key = id(module)
        if key not in self._info:
            weakref.finalize(module, self._info.pop, key, None)
        self._info[key] = info

    def _role(self, path: str, module, named) -> tuple[int, str]:
        vocab = self.vocab
        parts = path.split(".")
        name, cls = parts[-1], type(module).__name__
        role = vocab.MODULE_ROLES.get(name)
        if isinstance(role, dict):  # c_proj, dense: the enclosing block decides
            block = next((vocab.MODULE_BLOCKS[p] for p in reversed(parts[:-1]) if p in vocab.MODULE_BLOCKS),
                         None)
            role = role.get(block)
        if role in self._gemm_roles and self._out_features(module):
            return _PROJECTION, role
        if self._expert_params(module):
            return _EXPERTS, "experts"
        if role == "elementwise":
            return _ELEMENTWISE, role
        block = vocab.MODULE_BLOCKS.get(name)
        if block is None and cls.endswith("Attention"):
            block = "attention"
        elif block is None and cls.endswith("MLP"):
            block = "mlp"
        if block:
            return _BLOCK, block
        if any(word in cls for word in vocab.ELEMENTWISE_CLASS_WORDS):
            return _ELEMENTWISE, "elementwise"
        return _NONE, ""

    def _expert_params(self, module) -> dict:
        """{name: role} of a module's own 3-D weights that the module table names as projections
        (`gate_up_proj`, `down_proj`: one matrix per expert)."""
        found = {}
        for name, param in module.named_parameters(recurse=False):
            role = self.vocab.MODULE_ROLES.get(name)
            if param.dim() == 3 and isinstance(role, str) and role in self._gemm_roles:
                found[name] = role
        return found

    def _describe(self, kind: int, path: str, word: str, module) -> _Info:
        if kind == _EXPERTS:
            return _Info(kind, path, word, params=self._expert_params(module))
        if kind == _PROJECTION:
            return _Info(kind, path, word, out_features=self._out_features(module))
        if kind == _ATTENTION:
            return _Info(kind, path, "attention",
                         heads=_first_int(module, "num_heads", "num_attention_heads", "n_head"),
                         kv_heads=_first_int(module, "num_kv_heads", "num_key_value_heads"),
                         head_dim=_first_int(module, "head_size", "head_dim"))
        return _Info(kind, path, word) if kind != _NONE else _SKIP

    @staticmethod
    def _out_features(module) -> int | None:
        """N of a projection: nn.Linear's out_features, GPT-2 Conv1D's nf, vLLM's per-partition
        output size, else the 2-D weight's rows."""
        found = _first_int(module, "out_features", "nf", "output_size_per_partition")
        if found:
            return found
        weight = getattr(module, "weight", None)
        if weight is not None and getattr(weight, "dim", lambda: 0)() == 2:
            return int(weight.shape[0])
        return None

    @staticmethod
    def _exit_mode(record: _Record) -> None:
        if record.mode is not None:
            mode, record.mode = record.mode, None
            mode.__exit__(None, None, None)

    # --- status and failure ----------------------------------------------------------------------

    def status(self) -> dict:
        return {"pid": os.getpid(), "torch_imported": self.torch_imported,
                "nvtx_package": self.nvtx_package, "nvtx_tool": self.domain is not None,
                "forwards": dict(self.forwards),
                "decode_steps": self._decode_step, "models": list(self.models), "error": self.error,
                "compiled_forwards": dict(self.compiled_forwards),
                "compiled_annotation": self.compiled_annotation,
                "graph_replays": dict(self.graph_replays),
                "stopped_after": self.stopped}

    def write_status(self) -> None:
        if not self.status_path:
            return
        try:
            tmp = f"{self.status_path}.tmp"
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump(self.status(), handle)
            os.replace(tmp, self.status_path)
        except OSError:
            pass

    def _fail(self, err: Exception) -> None:
        """Annotation off for good, the ranges this thread opened closed: the program runs on."""
        self.error = f"{type(err).__name__}: {err}"
        self._close_all()
        self.write_status()

    def _close_all(self) -> None:
        state = self._thread
        pushed = sum(r.pushed for r in state.records) + state.setup_open + len(state.site)
        for record in state.records:
            self._exit_mode(record)
        state.records, state.model, state.pending, state.setup_open, state.site = [], None, None, False, ()
        if self.domain is not None:
            for _ in range(pushed):
                self._pop()


def _sibling(name: str):
    """Another file of this folder as a module: by package where this one was imported so (tests),
    else by path under a private name, as boot/sitecustomize.py loads this one."""
    import importlib
    import importlib.util
    import sys
    if __package__:
        return importlib.import_module(f"{__package__}.{name}")
    full = f"{__name__}_{name}"
    if full not in sys.modules:
        spec = importlib.util.spec_from_file_location(full, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                         f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
    return sys.modules[full]


def boot(vocab, environ=os.environ) -> None:
    """Start-up in the profiled program: install the annotation once it imports torch."""
    import sys

    status_dir = environ.get("SMLENS_ANNOTATE_DIR")
    status_path = os.path.join(status_dir, f"annotate-{os.getpid()}.json") if status_dir else None
    domain, has_package = _nvtx_domain()
    annotator = Annotator(vocab, domain, setup=environ.get("SMLENS_ANNOTATE_SETUP") == "1",
                          status_path=status_path, stop_after=environ.get(STOP_ENV))
    annotator.nvtx_package = has_package
    if status_path:
        try:
            os.makedirs(status_dir, exist_ok=True)
        except OSError:
            annotator.status_path = None
        annotator.write_status()
        atexit.register(annotator.write_status)
    if "torch" in sys.modules:
        annotator.install(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _AfterImport("torch", annotator.install))


def _nvtx_domain():
    """(the `smlens` domain when an NVTX tool (ncu) is attached, else None; whether the `nvtx`
    package is there). With no tool the package hands out a dummy domain whose attributes are None."""
    try:
        import nvtx
    except ImportError:
        return None, False
    domain = nvtx.get_domain(DOMAIN)
    return (domain if domain.get_event_attributes(message=DOMAIN) is not None else None), True


class _AfterImport:
    """A meta-path finder that runs `then(module)` once `name` has been imported, and steps aside."""

    def __init__(self, name: str, then):
        self.name, self.then = name, then
        self._searching = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or self._searching:
            return None
        import importlib.util
        import sys
        # stays on the meta path until the module is executed: a program may look the module up
        # without importing it (vLLM's importlib.util.find_spec("torch") before `import torch`)
        self._searching = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._searching = False
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module, then, finder = loader.exec_module, self.then, self

        def exec_then(module):
            exec_module(module)
            if finder in sys.meta_path:
                sys.meta_path.remove(finder)
            try:
                then(module)
            except Exception:  # noqa: BLE001 - the program runs on without annotation
                pass

        loader.exec_module = exec_then
        return spec
