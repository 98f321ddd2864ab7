"""Capture one training step of a PyTorch model on the meta device: every aten operation of
the forward pass, the backward pass and the optimizer step, with the storages it reads and
writes, and the order in which storages are allocated and freed (docs/preview.md).

Note [Meta capture]
Rationale: planning a budget needs the program's buffers, their sizes and lifetimes, and
  which operation reads and writes which buffer; none of it needs the values. On the meta
  device every operation computes shapes only, so a ResNet-152 step at batch 64 runs on a
  laptop CPU in seconds, with nothing downloaded and no GPU.
Approach: the model and its batch live on "meta"; one warm-up step creates the optimizer's
  state and gradients, then a TorchDispatchMode sees every aten call of a second step. An
  operation's writes are its schema's mutable arguments (in-place, out=) and every output
  whose storage no input has (a fresh allocation, recorded just before it); its reads are
  the other tensor inputs. Views are resolved to their storage (untyped_storage(), whose
  Python object PyTorch keeps alive exactly as long as the storage), and an operation that
  only makes views writes nothing and is not a launch. A storage is freed when its weakref
  callback runs: that is when the last tensor, view, autograd saved tensor or .grad holding
  it goes, in program order. empty/empty_strided allocate without a launch, as on a GPU.
Limitations: the program is the one PyTorch runs on meta, not on CUDA (attention aside,
  Note [Fused attention on meta]): cuDNN workspaces,
  cuBLAS handles and the caching allocator's rounding are absent, and a few operations
  decompose differently (batch norm saves what the native kernel saves). An operation with
  no meta kernel, or one that needs tensor values (item(), nonzero()), cannot be captured:
  CaptureError names it.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import gpus

__all__ = ["CaptureError", "Capture", "Op", "StorageInfo", "capture_step", "load_model", "KINDS"]

# What a storage holds, for the baseline breakdown.
KINDS = ("parameters", "gradients", "optimizer_state", "activations", "other")

# Factory operations that only allocate: no kernel runs on a GPU.
_ALLOCATE_ONLY = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
                  "aten::new_empty_strided", "aten::empty_permuted"}

# What a user wrote, for operations whose aten name does not say it.
_HINTS = {"aten::_local_scalar_dense": " (Tensor.item(), float(t), int(t) or bool(t))",
          "aten::is_nonzero": " (bool(t), or a tensor in an if)"}


class CaptureError(RuntimeError):
    """The step could not be captured; the message names the operation and the way out."""


@dataclass
class StorageInfo:
    id: int
    nbytes: int
    kind: str = "activations"          # one of KINDS
    preexisting: bool = False          # live before the captured step began
    address: int = 0                   # synthetic device address (planning trace)


@dataclass
class Op:
    name: str                          # "aten::convolution", "aten::add_.Tensor"
    phase: str                         # "forward", "backward", "optimizer"
    writes: List[int]                  # storage ids, in argument order, no repeats
    reads: List[int]                   # storage ids read and not written
    flops: int = 0                     # torch.utils.flop_counter's rule, 0 where it has none
    bytes_moved: int = 0               # bytes of the tensors read and written (views: their own extent)
    dtype: str = "float32"             # the first floating input's dtype
    matmul: bool = False               # has a FLOP rule (tensor-core work)
    conv: bool = False                 # a convolution (cuDNN: TF32 for float32)


@dataclass
class Capture:
    """One captured training step. `events` is the program order: ("alloc", storage id),
    ("free", storage id) and ("op", op index). Storages live before the step are listed in
    `storages` with preexisting=True and have no alloc event."""

    storages: Dict[int, StorageInfo] = field(default_factory=dict)
    ops: List[Op] = field(default_factory=list)
    events: List[Tuple[str, int]] = field(default_factory=list)
    description: str = ""

    def estimate_seconds(self, gpu: str) -> List[float]:
        """Per op, the roofline estimate of its duration on `gpu` (gpus.py)."""
        spec = gpus.get(gpu)
        return [spec.estimate(op.flops, op.bytes_moved, op.dtype, op.matmul, op.conv) for op in self.ops]

    def live_profile(self) -> Tuple[int, int, Dict[str, int]]:
        """(peak live bytes, event index of the peak, the peak's bytes per kind), exact bytes."""
        live = {k: 0 for k in KINDS}
        for s in self.storages.values():
            if s.preexisting:
                live[s.kind] += s.nbytes
        total = sum(live.values())
        best, best_at, best_split = total, 0, dict(live)
        for i, (what, ident) in enumerate(self.events):
            if what == "op":
                continue
            s = self.storages[ident]
            delta = s.nbytes if what == "alloc" else -s.nbytes
            live[s.kind] += delta
            total += delta
            if total > best:
                best, best_at, best_split = total, i, dict(live)
        return best, best_at, best_split


def _schema_name(func: Any) -> str:
    name = func._schema.name
    overload = func._overloadname
    return name if overload == "default" else f"{name}.{overload}"


class _Recorder:
    """The dispatch mode's state (kept apart from the mode so the mode class stays small)."""

    def __init__(self) -> None:
        import torch
        from torch.utils.flop_counter import flop_registry

        self.torch = torch
        self.flop_registry = flop_registry
        self.capture = Capture()
        self.phase = "forward"
        self.by_cdata: Dict[int, int] = {}     # live StorageImpl pointer -> storage id
        self.refs: Dict[int, Any] = {}         # storage id -> weakref (kept alive)
        self.next_id = 0
        self.recording = True

    # -- storages ---------------------------------------------------------------------
    def _on_free(self, ident: int, cdata: int) -> None:
        if self.by_cdata.get(cdata) == ident:
            del self.by_cdata[cdata]
        self.refs.pop(ident, None)
        if self.recording:
            self.capture.events.append(("free", ident))

    def register(self, storage: Any, *, kind: str, preexisting: bool) -> Optional[int]:
        cdata = storage._cdata
        known = self.by_cdata.get(cdata)
        if known is not None:
            return known
        nbytes = int(storage.nbytes())
        if nbytes == 0:
            return None
        ident = self.next_id
        self.next_id += 1
        self.by_cdata[cdata] = ident
        self.capture.storages[ident] = StorageInfo(ident, nbytes, kind, preexisting)
        self.refs[ident] = weakref.ref(storage, lambda _r, i=ident, c=cdata: self._on_free(i, c))
        if not preexisting:
            self.capture.events.append(("alloc", ident))
        return ident

    def known(self, storage: Any) -> Optional[int]:
        return self.by_cdata.get(storage._cdata)

    # -- operations -------------------------------------------------------------------
    def tensors(self, value: Any) -> List[Any]:
        torch = self.torch
        if isinstance(value, torch.Tensor):
            return [value]
        if isinstance(value, (list, tuple)):
            return [v for v in value if isinstance(v, torch.Tensor)]
        return []

    def record(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        torch = self.torch
        name = _schema_name(func)
        schema = func._schema
        written_inputs: List[Any] = []
        read_inputs: List[Any] = []
        for i, arg in enumerate(schema.arguments):
            value = args[i] if i < len(args) else kwargs.get(arg.name)
            ts = self.tensors(value)
            if not ts:
                continue
            if arg.alias_info is not None and arg.alias_info.is_write:
                written_inputs.extend(ts)
            else:
                read_inputs.extend(ts)
        input_ids = set()
        reads: List[int] = []
        writes: List[int] = []
        for t in read_inputs + written_inputs:
            st = t.untyped_storage()
            ident = self.known(st)
            if ident is None:  # held from before the step, not registered: an attribute tensor
                ident = self.register(st, kind="other", preexisting=True)
            if ident is not None:
                input_ids.add(ident)
        for t in written_inputs:
            ident = self.known(t.untyped_storage())
            if ident is not None and ident not in writes:
                writes.append(ident)
        outs = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        for t in outs:
            st = t.untyped_storage()
            ident = self.known(st)
            if ident is None:
                ident = self.register(st, kind="activations", preexisting=False)
                if ident is not None and ident not in writes:
                    writes.append(ident)
        if schema.name in _ALLOCATE_ONLY or not writes:
            return  # an allocation, or views / metadata only: no kernel
        for t in read_inputs:
            ident = self.known(t.untyped_storage())
            if ident is not None and ident not in writes and ident not in reads:
                reads.append(ident)
        moved = 0
        dtype = None
        for t in read_inputs + written_inputs + outs:
            moved += t.numel() * t.element_size()
            if dtype is None and t.is_floating_point():
                dtype = t.dtype
        flops = 0
        rule = self.flop_registry.get(func._overloadpacket)
        if rule is not None:
            try:
                flops = int(rule(*args, **kwargs, out_val=out))
            except Exception:  # a rule that does not fit this overload: count bytes only
                flops = 0
        base = schema.name
        self.capture.ops.append(Op(
            name=name, phase=self.phase, writes=writes, reads=reads, flops=flops, bytes_moved=moved,
            dtype=str(dtype).replace("torch.", "") if dtype is not None else "float32",
            matmul=rule is not None and flops > 0,
            conv="convolution" in base or "conv" in base.split("::")[-1][:5]))
        self.capture.events.append(("op", len(self.capture.ops) - 1))


def _mode_class() -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    class _CaptureMode(TorchDispatchMode):
        def __init__(self, recorder: _Recorder) -> None:
            super().__init__()
            self.recorder = recorder

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: N802 (torch's name)
            kwargs = kwargs or {}
            try:
                out = func(*args, **kwargs)
            except CaptureError:
                raise
            except Exception as e:
                raise CaptureError(
                    f"sublinear capture: the operation {_schema_name(func)} ({self.recorder.phase} pass) cannot "
                    f"run on the meta device: {str(e).splitlines()[0] if str(e) else type(e).__name__}. The "
                    f"capture computes shapes only: an operation that needs tensor values (item(), nonzero(), "
                    f"data-dependent control flow) or has no meta kernel cannot be captured. Make that part of "
                    f"the model shape-static, or register a meta kernel for a custom operation "
                    f"(torch.library.register_fake)") from None
            self.recorder.record(func, args, kwargs, out)
            return out

    return _CaptureMode


@contextlib.contextmanager
def _fused_attention() -> Any:
    """Note [Fused attention on meta]: on meta, F.scaled_dot_product_attention falls back to
    its math decomposition (a T x T score matrix per head, softmax, masks), which a GPU never
    runs: it picks a fused kernel. While capturing, the call goes to the fused kernel's aten
    operation instead, flash attention for 16-bit inputs and the memory-efficient kernel for
    float32, as PyTorch's CUDA dispatch would for inputs without an explicit mask or dropout;
    other calls keep the original path. Grouped-query inputs are expanded first."""
    import torch
    import torch.nn.functional as F

    original = F.scaled_dot_product_attention

    def fused(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if attn_mask is not None or dropout_p != 0.0 or query.dim() != 4 or query.device.type != "meta":
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                            scale=scale, enable_gqa=enable_gqa)
        if key.shape[1] != query.shape[1]:
            repeat = query.shape[1] // key.shape[1]
            key = key.repeat_interleave(repeat, dim=1)
            value = value.repeat_interleave(repeat, dim=1)
        if query.dtype in (torch.float16, torch.bfloat16):
            return torch.ops.aten._scaled_dot_product_flash_attention(query, key, value, 0.0, is_causal,
                                                                      scale=scale)[0]
        return torch.ops.aten._scaled_dot_product_efficient_attention(query, key, value, None, True, 0.0,
                                                                      is_causal, scale=scale)[0]

    F.scaled_dot_product_attention = fused
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


def _default_loss(output: Any) -> Any:
    import torch
    import torch.nn.functional as F

    first = output
    if isinstance(output, dict):
        first = next(v for v in output.values() if isinstance(v, torch.Tensor))
    elif isinstance(output, (list, tuple)):
        first = next(v for v in output if isinstance(v, torch.Tensor))
    if first.dim() == 2 and first.is_floating_point():  # (batch, classes): classification
        target = torch.randint(0, first.shape[1], (first.shape[0],), device=first.device)
        return F.cross_entropy(first.float() if first.dtype != torch.float32 else first, target)
    if first.dim() == 3 and first.is_floating_point():  # (batch, sequence, vocabulary): language model
        target = torch.randint(0, first.shape[2], first.shape[:2], device=first.device)
        return F.cross_entropy(first.flatten(0, 1), target.flatten())
    return first.float().pow(2).mean()


def _make_optimizer(name: str, params: List[Any]) -> Any:
    import torch

    if name == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=True)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, foreach=True)
    raise CaptureError(f"sublinear capture: unknown optimizer {name!r}; give sgd or adamw")


def _as_tuple(inputs: Any) -> Tuple[tuple, dict]:
    import torch

    if isinstance(inputs, dict):
        return (), dict(inputs)
    if isinstance(inputs, torch.Tensor):
        return (inputs,), {}
    return tuple(inputs), {}


def _to_meta(value: Any, dtype: Any) -> Any:
    import torch

    def move(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        if t.device.type != "meta":
            t = t.to("meta")
        if dtype is not None and t.is_floating_point():
            t = t.to(dtype)
        return t

    return torch.utils._pytree.tree_map(move, value)


def capture_step(model: Any, example_inputs: Any, loss_fn: Optional[Callable[[Any], Any]] = None,
                 optimizer: str = "sgd", dtype: Optional[str] = None) -> Capture:
    """Captures one training step (forward, loss, backward, optimizer step) of `model` on
    `example_inputs` (a tensor, a tuple of positional inputs or a dict of keyword inputs).

    The model is moved to the meta device if it is not there (build it under
    `with torch.device("meta"):` to skip initialising weights). `loss_fn(output)` returns the
    scalar loss (default: cross-entropy against random labels for (batch, classes) or
    (batch, sequence, vocabulary) outputs, else the mean square). `dtype` "bfloat16" trains
    in pure bfloat16 (parameters, activations, gradients and optimizer state)."""
    import torch

    torch_dtype = {None: None, "float32": torch.float32, "bfloat16": torch.bfloat16,
                   "float16": torch.float16}.get(dtype, "bad")
    if torch_dtype == "bad":
        raise CaptureError(f"sublinear capture: unknown dtype {dtype!r}; give float32 or bfloat16")
    if any(p.device.type != "meta" for p in model.parameters()) or any(
            b.device.type != "meta" for b in model.buffers()):
        model = model.to("meta")
    if torch_dtype is not None:
        model = model.to(torch_dtype)
    model.train()
    args, kwargs = _as_tuple(_to_meta(example_inputs, torch_dtype))
    loss_fn = loss_fn or _default_loss
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise CaptureError("sublinear capture: the model has no trainable parameters; nothing to train")
    opt = _make_optimizer(optimizer, params)

    def step(rec: Optional[_Recorder]) -> None:
        if rec:
            rec.phase = "optimizer"
        opt.zero_grad(set_to_none=True)
        if rec:
            rec.phase = "forward"
        loss = loss_fn(model(*args, **kwargs))
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise CaptureError("sublinear capture: loss_fn must return a scalar tensor")
        if rec:
            rec.phase = "backward"
        loss.backward()
        del loss
        if rec:
            rec.phase = "optimizer"
        opt.step()

    # Warm-up: gradients and optimizer state exist from here on, as in every later step.
    # The optimizer makes its state from gradients of the right shape: no forward pass needed.
    with _fused_attention(), _mode_class()(_Recorder()):
        for p in params:
            p.grad = torch.empty_like(p)
        opt.step()
    rec = _Recorder()
    rec.recording = True
    for p in params:
        rec.register(p.untyped_storage(), kind="parameters", preexisting=True)
    for p in params:
        if p.grad is not None:
            rec.register(p.grad.untyped_storage(), kind="gradients", preexisting=True)
    for state in opt.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor):
                rec.register(v.untyped_storage(), kind="optimizer_state", preexisting=True)
    for p in model.parameters():
        rec.register(p.untyped_storage(), kind="parameters", preexisting=True)
    for b in model.buffers():
        rec.register(b.untyped_storage(), kind="other", preexisting=True)
    for t in torch.utils._pytree.tree_leaves((args, kwargs)):
        if isinstance(t, torch.Tensor):
            rec.register(t.untyped_storage(), kind="other", preexisting=True)
    with _fused_attention(), _mode_class()(rec):
        step(rec)
    rec.recording = False
    grads = {rec.known(p.grad.untyped_storage()) for p in params if p.grad is not None}
    for ident in grads:
        if ident is not None:
            rec.capture.storages[ident].kind = "gradients"
    return rec.capture


def load_model(spec: str, batch: Optional[int] = None, input_shape: Optional[Sequence[int]] = None,
               dtype: Optional[str] = None) -> Tuple[Any, Any, Optional[Callable[[Any], Any]]]:
    """Builds the model named by `spec` on the meta device and its example batch.

    "module.path:callable" (torchvision.models:resnet152) calls the callable with no arguments
    and makes a random batch of `batch` x `input_shape`. "path/to/file.py:factory" calls
    factory(batch) (or factory() when batch is None) in that file, which returns
    (model, example_inputs) or (model, example_inputs, loss_fn) (docs/preview.md)."""
    import torch

    if ":" not in spec:
        raise CaptureError(f"sublinear capture: --model {spec!r} needs the form module:callable "
                           f"(torchvision.models:resnet152) or path/to/file.py:factory")
    where, attr = spec.rsplit(":", 1)
    is_file = where.endswith(".py")
    try:
        if is_file:
            path = Path(where)
            if not path.is_file():
                raise CaptureError(f"sublinear capture: --model {spec!r}: no file {where}")
            mod_spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(mod_spec)
            mod_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except ImportError as e:
        raise CaptureError(f"sublinear capture: --model {spec!r}: cannot import {where}: {e}") from None
    factory = getattr(module, attr, None)
    if factory is None or not callable(factory):
        raise CaptureError(f"sublinear capture: --model {spec!r}: {where} has no callable {attr}")
    with torch.device("meta"):
        if is_file:
            made = factory(batch) if batch is not None else factory()
            if not isinstance(made, tuple) or len(made) not in (2, 3):
                raise CaptureError(f"sublinear capture: {spec} must return (model, example_inputs) or "
                                   f"(model, example_inputs, loss_fn)")
            model, inputs = made[0], made[1]
            loss_fn = made[2] if len(made) == 3 else None
            return model, inputs, loss_fn
        model = factory()
        if batch is None or input_shape is None:
            raise CaptureError(f"sublinear capture: --model {spec!r} needs --batch N and --input-shape C,H,W "
                               f"(a factory file can make its own batch)")
        inputs = torch.randn(batch, *input_shape)
        return model, inputs, None


def describe(capture: Capture) -> str:
    n = len(capture.ops)
    phases = {p: sum(1 for o in capture.ops if o.phase == p) for p in ("forward", "backward", "optimizer")}
    return f"{n} operations ({phases['forward']} forward, {phases['backward']} backward, " \
           f"{phases['optimizer']} optimizer), {len(capture.storages)} storages"
