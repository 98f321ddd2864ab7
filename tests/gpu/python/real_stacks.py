#!/usr/bin/env python3
"""One training run of the GPU suite's part 5 (real training stacks); prints one JSON object.

    real_stacks.py --model gpt|resnet50|ddp --mode baseline|checkpoint|enable
                   [--compile] [--budget B] [--iterations N] [--repeat N] [--quick]
                   [--report PATH] [--dump PATH] [--dry-run]

Models, sized for an H200:
  gpt       a GPT-2-small decoder (124M parameters: 12 layers, 768 wide, 12 heads, vocabulary
            50257, context 1024), batch 8, bf16 autocast, attention through
            F.scaled_dot_product_attention (causal), fused AdamW; --compile wraps it in
            torch.compile (default mode: Triton kernels)
  resnet50  ResNet-50 at 224x224, batch 64, channels-last, bf16 autocast, SGD with momentum
  ddp       the gpt model (6 layers) in DistributedDataParallel, world size 1 over NCCL
Modes: baseline (PyTorch's allocator), checkpoint (torch.utils.checkpoint around every block
or stage), enable (sublinear.torch.enable(budget=B, report=PATH) before CUDA is touched;
--offload off plans recompute only).

Note [Real stacks]
Rationale: sublinear had run only fp32, eager, deterministic, small models; what users train
  is bf16 with fused attention, compiled Triton kernels, fused optimizers and NCCL, and each
  brings launches sublinear must follow (cuLaunchKernelEx with attributes, Triton's
  launches, NCCL kernels that must never be replayed).
Approach: one process per run (the allocator is chosen once per process); deterministic
  settings where PyTorch has them (torch.use_deterministic_algorithms with warn_only, so a
  kernel without a deterministic implementation is named in `nondeterministic_ops`
  instead of failing); --repeat trains again from the same seeds in the same process, so
  the orchestrator (real_stacks_suite.py) knows whether the model is deterministic here
  and, if not, the baseline's own run-to-run spread of the loss.
Limitations: --dry-run trains tiny versions on the CPU (gloo for DDP, the aot_eager backend
  for --compile), and an `enable` run trains without sublinear (it needs a GPU): it checks
  the scripts, not sublinear.

Exit status 0 after training, 77 when torch or a GPU is missing, 1 on failure.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import socket
import sys
import time
import traceback
import warnings
from typing import Any, Dict, List, Tuple

SKIP = 77


def emit(obj: Dict[str, Any]) -> None:
    print(json.dumps(obj), flush=True)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["gpt", "resnet50", "ddp"], required=True)
    p.add_argument("--mode", choices=["baseline", "checkpoint", "enable"], required=True)
    p.add_argument("--compile", action="store_true", help="torch.compile (default mode)")
    p.add_argument("--budget", default=None)
    p.add_argument("--offload", choices=["auto", "off", "only"], default=None,
                   help="SUBLINEAR_OFFLOAD for --mode enable (default: the environment's, auto)")
    p.add_argument("--iterations", type=int, default=0, help="default 8 (6 with --quick, 3 with --dry-run)")
    p.add_argument("--repeat", type=int, default=1, help="train this many times from the same seeds")
    p.add_argument("--quick", action="store_true", help="fewer iterations")
    p.add_argument("--report", default=None)
    p.add_argument("--dump", default=None, help="per-tensor hashes of the first training (JSON)")
    p.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU (no GPU, no sublinear)")
    return p.parse_args()


# ---- sizes and models ----------------------------------------------------------------------------

def sizes(model: str, dry: bool) -> Dict[str, int]:
    if model == "resnet50":
        return {"batch": 2, "image": 32, "classes": 10} if dry else {"batch": 64, "image": 224, "classes": 1000}
    layers = 6 if model == "ddp" else 12
    if dry:
        return {"layers": 2, "width": 64, "heads": 4, "vocab": 256, "context": 32, "batch": 2}
    return {"layers": layers, "width": 768, "heads": 12, "vocab": 50257, "context": 1024, "batch": 8}


def build_gpt(torch: Any, s: Dict[str, int]) -> Any:
    """A GPT-2-style decoder: token and position embeddings, pre-LayerNorm blocks with causal
    SDPA attention and a GELU MLP, the output head tied to the token embedding. No dropout."""
    nn, F = torch.nn, torch.nn.functional
    width, heads = s["width"], s["heads"]

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x: Any) -> Any:
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(s["vocab"], width), nn.Embedding(s["context"], width)
            self.blocks = nn.ModuleList([Block() for _ in range(s["layers"])])
            self.ln = nn.LayerNorm(width)
            self.head = nn.Linear(width, s["vocab"], bias=False)
            self.head.weight = self.tok.weight
            for m in self.modules():  # GPT-2's initialization
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, mean=0.0, std=0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)

        def forward(self, idx: Any, run_block: Any = None) -> Any:
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.tok(idx) + self.pos(pos)
            for blk in self.blocks:
                x = blk(x) if run_block is None else run_block(blk, x)
            return self.head(self.ln(x))

    return GPT()


def build_resnet(torch: Any, classes: int) -> Tuple[Any, str]:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import torch_e2e  # noqa: PLC0415 - the suite's ResNet-50 (torchvision's, or the same architecture)
    return torch_e2e.build_resnet50(torch, classes)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---- the run --------------------------------------------------------------------------------------

def main() -> int:
    a = parse()
    result: Dict[str, Any] = {"model": a.model + ("+compile" if a.compile else ""), "mode": a.mode,
                              "dry_run": a.dry_run, "quick": a.quick}
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    try:
        import torch  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001
        emit({**result, "status": "skipped", "reason": f"torch is not importable here ({e})"})
        return SKIP
    result["torch"] = torch.__version__
    if not a.dry_run and not torch.cuda.is_available():
        emit({**result, "status": "skipped", "reason": f"no CUDA device visible to torch {torch.__version__}"})
        return SKIP
    sublinear = None
    if a.mode == "enable" and a.dry_run:
        result["sublinear"] = "not in a dry run: trained without it"
    elif a.mode == "enable":
        try:
            import sublinear as sublinear_pkg  # noqa: PLC0415
            import sublinear.torch as sublinear_torch  # noqa: PLC0415
            extra = {"offload": a.offload} if a.offload else {}
            sublinear_torch.enable(budget=a.budget, report=a.report, **extra)
        except Exception as e:  # noqa: BLE001
            emit({**result, "status": "failed", "reason": f"sublinear.torch.enable() failed: {type(e).__name__}: {e}"})
            return 1
        sublinear = sublinear_pkg
    try:
        if a.model == "ddp":
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1")
            torch.distributed.init_process_group("gloo" if a.dry_run else "nccl", rank=0, world_size=1)
            result["ddp_backend"] = torch.distributed.get_backend()
        runs = [train(torch, a, sublinear, dump=a.dump if k == 0 else None) for k in range(max(1, a.repeat))]
    except Exception as e:  # noqa: BLE001 - the JSON carries every failure
        emit({**result, "status": "failed", "reason": f"{type(e).__name__}: {e}",
              "traceback": traceback.format_exc()[-4000:]})
        return 1
    finally:
        if a.model == "ddp" and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    result.update(runs[0])
    result["repeats"] = [{"state_sha256": r["state_sha256"], "loss": r["loss"]} for r in runs[1:]]
    if sublinear is not None:
        result["sublinear_stats"] = sublinear.stats()
        if a.report:
            sublinear.write_report(a.report)
    finite = all(x == x and abs(x) != float("inf") for x in result["loss"])
    emit({**result, "status": "passed" if finite else "failed",
          **({} if finite else {"reason": f"a loss is not finite: {result['loss']}"})})
    return 0 if finite else 1


def train(torch: Any, a: argparse.Namespace, sublinear: Any, dump: Any) -> Dict[str, Any]:
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    from torch.utils.checkpoint import checkpoint  # noqa: PLC0415

    out: Dict[str, Any] = {}
    on_gpu = not a.dry_run
    device = torch.device("cuda" if on_gpu else "cpu")
    iterations = a.iterations or (3 if a.dry_run else 6 if a.quick else 8)
    s = sizes(a.model, a.dry_run)
    out["sizes"] = s
    data = torch.Generator().manual_seed(1234)
    if a.model == "resnet50":
        model, out["definition"] = build_resnet(torch, s["classes"])
        model = model.to(device).to(memory_format=torch.channels_last).train()
        stages = ["layer1", "layer2", "layer3", "layer4"]

        def forward(x: Any) -> Any:
            if a.mode != "checkpoint":
                return model(x)
            x = model.maxpool(model.relu(model.bn1(model.conv1(x))))
            for name in stages:
                x = checkpoint(getattr(model, name), x, use_reentrant=False)
            return model.fc(torch.flatten(model.avgpool(x), 1))

        def batch_of() -> Any:
            x = torch.randn(s["batch"], 3, s["image"], s["image"], generator=data)
            return (x.to(device).contiguous(memory_format=torch.channels_last),
                    torch.randint(0, s["classes"], (s["batch"],), generator=data).to(device))

        def loss_of(x: Any, y: Any) -> Any:
            return torch.nn.functional.cross_entropy(forward(x), y)

        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        model = build_gpt(torch, s).to(device).train()
        out["parameters"] = sum(p.numel() for p in model.parameters())
        core = model
        if a.model == "ddp":
            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0] if on_gpu else None)
        run_block = (lambda blk, x: checkpoint(blk, x, use_reentrant=False)) if a.mode == "checkpoint" else None
        step = (lambda idx: model(idx, run_block)) if run_block is not None else model
        if a.compile:
            step = torch.compile(step, **({"backend": "aot_eager"} if a.dry_run else {}))

        def batch_of() -> Any:
            idx = torch.randint(0, s["vocab"], (s["batch"], s["context"] + 1), generator=data)
            return idx[:, :-1].to(device), idx[:, 1:].to(device)

        def loss_of(x: Any, y: Any) -> Any:
            logits = step(x)
            return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))

        optimizer = torch.optim.AdamW(core.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    times: List[float] = []
    peaks: List[int] = []
    budgets: List[int] = []
    losses: List[float] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(iterations):
            x, y = batch_of()
            if sublinear is not None:
                budgets.append(sublinear.stats()["budget"])
                sublinear.reset_peaks()
            elif on_gpu:
                torch.cuda.reset_peak_memory_stats()
            if on_gpu:
                torch.cuda.synchronize()
            start = time.perf_counter()
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = loss_of(x, y)
            loss.backward()
            optimizer.step()  # sublinear.torch marks the iteration here
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
            if on_gpu:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
            del x, y, loss
            if sublinear is not None:
                peaks.append(sublinear.stats()["mapped_peak"])
            elif on_gpu:
                peaks.append(int(torch.cuda.max_memory_reserved()))
    nondeterministic = sorted({str(w.message).split("\n")[0][:300] for w in caught
                               if "deterministic" in str(w.message)})
    out.update(iterations=iterations, iteration_s=times, peak_bytes=peaks, loss=losses,
               nondeterministic_ops=nondeterministic)
    if sublinear is not None:
        out["budget_bytes"] = budgets
    hashes = {}
    whole = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        host = tensor.detach().to("cpu").contiguous()
        raw = ctypes.string_at(host.data_ptr(), host.numel() * host.element_size()) if host.numel() else b""
        hashes[name] = hashlib.sha256(raw).hexdigest()
        whole.update(name.encode() + b"\0" + hashes[name].encode())
    out.update(state_sha256=whole.hexdigest(), tensors=len(hashes))
    if dump:
        with open(dump, "w", encoding="utf-8") as f:
            json.dump(hashes, f, indent=0, sort_keys=True)
    return out


if __name__ == "__main__":
    sys.exit(main())
