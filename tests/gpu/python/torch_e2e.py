#!/usr/bin/env python3
"""One PyTorch training run for the GPU suite; prints one JSON object.

    torch_e2e.py --model resnet50|gpt2 --mode MODE [--iterations N] [--quick]
                 [--budget B] [--policy P] [--report PATH] [--dump PATH]

MODE is one of
  baseline    PyTorch's own caching allocator, no checkpointing
  checkpoint  the same with torch.utils.checkpoint around every stage (ResNet) or block (GPT-2)
  enable      sublinear through sublinear.torch.enable(budget=..., policy=..., report=...)
  preload     nothing sublinear-specific in the program: run it under `sublinear run` with
              PYTORCH_NO_CUDA_MEMORY_CACHING=1 (torch_suite.py does)

Note [PyTorch end to end]
Rationale: the product's promise on PyTorch is that a training loop run under a budget ends
  with the same parameters as without sublinear, bit for bit, while mapped memory stays under
  the budget, and that this costs less time than op-level checkpointing at the same memory.
  Only a process per configuration can show it: the allocator is chosen once per process.
Approach: deterministic training (torch.use_deterministic_algorithms, CUBLAS_WORKSPACE_CONFIG,
  no TF32, no cuDNN autotuning, a fixed seed for the model, the data and dropout); the data are
  drawn on the CPU from a seeded generator per iteration. After training, every tensor of the
  state dict (parameters and BatchNorm statistics) is hashed; torch_suite.py compares hashes
  between processes. Peaks come from torch.cuda.max_memory_reserved() with PyTorch's
  allocator and from sublinear.stats() (mapped bytes) with sublinear.enable(); under the
  preload route from sublinear's report.
Limitations: FP32 only. ResNet-50 comes from torchvision when it is importable, otherwise from
  the definition below (the same architecture, not the same initialization).

Exit status 0 after training, 77 when torch or a GPU is missing (the JSON says which), 1 on
failure.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import math
import os
import sys
import time
import traceback
from typing import Any, Dict, List

SKIP = 77


def emit(obj: Dict[str, Any]) -> None:
    print(json.dumps(obj), flush=True)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["resnet50", "gpt2"], required=True)
    p.add_argument("--mode", choices=["baseline", "checkpoint", "enable", "preload"], required=True)
    p.add_argument("--iterations", type=int, default=0, help="default: 12 (10 with --quick)")
    p.add_argument("--quick", action="store_true", help="smaller inputs and fewer iterations")
    p.add_argument("--budget", default=None)
    p.add_argument("--policy", default=None)
    p.add_argument("--report", default=None)
    p.add_argument("--dump", default=None, help="write the per-tensor hashes here (JSON)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: a dry run of the models and the loop (baseline and checkpoint modes only)")
    return p.parse_args()


# ---- models --------------------------------------------------------------------------------

def build_resnet50(torch: Any, classes: int) -> Any:
    """torchvision's ResNet-50, or the same architecture defined here."""
    try:
        import torchvision  # noqa: PLC0415
        return torchvision.models.resnet50(weights=None, num_classes=classes), "torchvision"
    except Exception:  # noqa: BLE001 - any failure to import means: use our own
        pass
    nn = torch.nn

    class Bottleneck(nn.Module):
        def __init__(self, inplanes: int, planes: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or inplanes != planes * 4:
                self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride=stride, bias=False),
                                                nn.BatchNorm2d(planes * 4))

        def forward(self, x: Any) -> Any:
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + identity)

    class ResNet50(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
            inplanes = 64
            for i, (planes, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]):
                layers = []
                for b in range(blocks):
                    layers.append(Bottleneck(inplanes, planes, stride if b == 0 else 1))
                    inplanes = planes * 4
                setattr(self, f"layer{i + 1}", nn.Sequential(*layers))
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(2048, classes)

        def forward(self, x: Any) -> Any:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet50(), "self-contained"


def build_gpt2(torch: Any, layers: int, width: int, heads: int, context: int, dropout: float) -> Any:
    """GPT-2-sized Transformer blocks (pre-LayerNorm, causal attention written out so that
    every kernel is a deterministic one, dropout on attention and residual paths)."""
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(width)
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)
            self.ln2 = nn.LayerNorm(width)
            self.fc = nn.Linear(width, 4 * width)
            self.out = nn.Linear(4 * width, width)
            self.register_buffer("mask", torch.tril(torch.ones(context, context, dtype=torch.bool)), persistent=False)

        def forward(self, x: Any) -> Any:
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // heads))
            att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
            att = F.dropout(F.softmax(att, dim=-1), dropout, self.training)
            y = (att @ v).transpose(1, 2).reshape(b, t, c)
            x = x + F.dropout(self.proj(y), dropout, self.training)
            return x + F.dropout(self.out(F.gelu(self.fc(self.ln2(x)))), dropout, self.training)

    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.ln = nn.LayerNorm(width)

        def forward(self, x: Any) -> Any:
            for blk in self.blocks:
                x = blk(x)
            return self.ln(x)

    return Stack()


# ---- the run -------------------------------------------------------------------------------

def main() -> int:
    a = parse()
    result: Dict[str, Any] = {"model": a.model, "mode": a.mode, "quick": a.quick}
    # Determinism settings that must precede CUDA initialization.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    try:
        import torch  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001
        emit({**result, "status": "skipped", "reason": f"torch is not importable here ({e}); the GPU machine has "
              "no network, so torch must be installed in its image"})
        return SKIP
    result["torch"] = torch.__version__
    if a.device == "cpu" and a.mode in ("enable", "preload"):
        emit({**result, "status": "failed", "reason": f"--mode {a.mode} needs --device cuda"})
        return 1
    if a.device == "cuda" and not torch.cuda.is_available():
        emit({**result, "status": "skipped", "reason": "no CUDA driver or device visible to torch "
              f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})"})
        return SKIP

    sublinear = None
    if a.mode == "enable":
        try:
            import sublinear.torch as sublinear_torch  # noqa: PLC0415
            import sublinear as sublinear_pkg  # noqa: PLC0415
        except Exception as e:  # noqa: BLE001
            emit({**result, "status": "skipped", "reason": f"the sublinear package is not importable ({e}); "
                  "install it with `pip install .` or let scripts/gpu-suite.sh stage it"})
            return SKIP
        # Before anything touches CUDA: the allocator can only be swapped first.
        try:
            sublinear_torch.enable(budget=a.budget, policy=a.policy, report=a.report)
        except Exception as e:  # noqa: BLE001
            emit({**result, "status": "failed", "reason": f"sublinear.torch.enable() refused: {type(e).__name__}: {e}"})
            return 1
        sublinear = sublinear_pkg

    try:
        train(torch, a, result, sublinear)
    except Exception as e:  # noqa: BLE001 - the JSON carries every failure
        emit({**result, "status": "failed", "reason": f"{type(e).__name__}: {e}",
              "traceback": traceback.format_exc()[-4000:]})
        return 1
    emit({**result, "status": "passed"})
    return 0


def train(torch: Any, a: argparse.Namespace, result: Dict[str, Any], sublinear: Any) -> None:
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    from torch.utils.checkpoint import checkpoint  # noqa: PLC0415

    iterations = a.iterations or (10 if a.quick else 12)
    device = torch.device(a.device)
    on_gpu = a.device == "cuda"
    data = torch.Generator().manual_seed(1234)
    if a.model == "resnet50":
        batch, side, classes = (8, 128, 100) if a.quick else (32, 224, 1000)
        model, source = build_resnet50(torch, classes)
        result.update(batch=batch, image=side, classes=classes, definition=source)
        stages = ["layer1", "layer2", "layer3", "layer4"]

        def forward(x: Any) -> Any:
            if a.mode != "checkpoint":
                return model(x)
            x = model.maxpool(model.relu(model.bn1(model.conv1(x))))
            for name in stages:
                x = checkpoint(getattr(model, name), x, use_reentrant=False)
            return model.fc(torch.flatten(model.avgpool(x), 1))

        def batch_of() -> Any:
            x = torch.randn(batch, 3, side, side, generator=data)
            y = torch.randint(0, classes, (batch,), generator=data)
            return x, y

        def loss_of(out: Any, y: Any) -> Any:
            return torch.nn.functional.cross_entropy(out, y)
    else:
        layers, batch, context = (2, 4, 256) if a.quick else (4, 8, 512)
        width, heads = 768, 12
        model = build_gpt2(torch, layers, width, heads, context, 0.1)
        result.update(batch=batch, context=context, layers=layers, width=width, heads=heads, dropout=0.1)

        def forward(x: Any) -> Any:
            if a.mode != "checkpoint":
                return model(x)
            for blk in model.blocks:
                x = checkpoint(blk, x, use_reentrant=False)
            return model.ln(x)

        def batch_of() -> Any:
            return torch.randn(batch, context, width, generator=data), torch.randn(batch, context, width, generator=data)

        def loss_of(out: Any, y: Any) -> Any:
            return torch.nn.functional.mse_loss(out, y)

    model = model.to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    times: List[float] = []
    peaks: List[int] = []
    budgets: List[int] = []
    losses: List[float] = []
    for _ in range(iterations):
        x, y = batch_of()
        if sublinear is not None:
            budgets.append(sublinear.stats()["budget"])  # in force for this iteration
            sublinear.reset_peaks()
        elif on_gpu:
            torch.cuda.reset_peak_memory_stats()
        if on_gpu:
            torch.cuda.synchronize()
        start = time.perf_counter()
        x, y = x.to(device), y.to(device)
        loss = loss_of(forward(x), y)
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
    result.update(iterations=iterations, iteration_s=times, peak_bytes=peaks, loss=losses)
    if sublinear is not None:
        result.update(budget_bytes=budgets, sublinear_stats=sublinear.stats())
        if a.report:
            sublinear.write_report(a.report)
    hashes = {}
    whole = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        host = tensor.detach().to("cpu").contiguous()
        # The bytes themselves (no numpy needed): hashes compare bit patterns, not values.
        raw = ctypes.string_at(host.data_ptr(), host.numel() * host.element_size()) if host.numel() else b""
        h = hashlib.sha256(raw).hexdigest()
        hashes[name] = h
        whole.update(name.encode() + b"\0" + h.encode())
    result.update(state_sha256=whole.hexdigest(), tensors=len(hashes))
    if a.dump:
        with open(a.dump, "w", encoding="utf-8") as f:
            json.dump(hashes, f, indent=0, sort_keys=True)


if __name__ == "__main__":
    sys.exit(main())
