"""Roofline estimates of an operation's duration on a named GPU (docs/preview.md).

Note [Roofline estimate]
Rationale: a capture on the meta device has no durations; the planners need a cost per
  launch to choose what to recompute. FLOPs and bytes moved bound a kernel's time from
  below on any GPU, and the ratio between kernels is what the planners weigh.
Approach: time = max(FLOPs / peak FLOP rate, bytes moved / memory bandwidth, a floor of
  2 us per launch). The peak rate is the tensor-core rate of the operation's dtype for
  operations torch.utils.flop_counter has a rule for (matrix products, convolutions,
  attention): bfloat16/float16 dense; float32 convolutions at TF32 (cuDNN's default,
  torch.backends.cudnn.allow_tf32) and other float32 products at the FP32 rate (PyTorch's
  default leaves TF32 off for matmul). Peak figures are NVIDIA's datasheet numbers for the
  SXM parts, dense (without sparsity): every figure here is an estimate and is labelled so.
Limitations: real kernels reach 50-80% of these peaks, small ones far less, and fused or
  split kernels on the device differ from aten operations; absolute times are optimistic,
  ratios less so. A trace recorded on the device (`sublinear plan --trace`) is the reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

__all__ = ["GpuSpec", "GPUS", "get"]

LAUNCH_FLOOR_S = 2e-6


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: int
    bandwidth: float     # bytes/s
    fp32: float          # FLOP/s, no tensor cores
    tf32: float          # FLOP/s, tensor cores, dense
    bf16: float          # FLOP/s, tensor cores, dense (float16 the same)
    source: str

    def estimate(self, flops: int, bytes_moved: int, dtype: str, matmul: bool, conv: bool) -> float:
        if matmul:
            if dtype in ("bfloat16", "float16"):
                rate = self.bf16
            elif conv:
                rate = self.tf32
            else:
                rate = self.fp32
        else:
            rate = self.fp32
        return max(flops / rate, bytes_moved / self.bandwidth, LAUNCH_FLOOR_S)


GPUS: Dict[str, GpuSpec] = {
    "h100": GpuSpec("NVIDIA H100 SXM5 80GB", 80 * 10**9, 3.35e12, 67e12, 494.7e12, 989.4e12,
                    "NVIDIA H100 Tensor Core GPU datasheet (SXM: FP32 67 TFLOPS, TF32 989 and BF16 1,979 "
                    "TFLOPS with sparsity, i.e. 494.7 and 989.4 dense; HBM3 3.35 TB/s)"),
    "h200": GpuSpec("NVIDIA H200 SXM 141GB", 141 * 10**9, 4.8e12, 67e12, 494.7e12, 989.4e12,
                    "NVIDIA H200 Tensor Core GPU datasheet (SXM: FP32 67 TFLOPS, TF32 989 and BF16 1,979 "
                    "TFLOPS with sparsity; HBM3e 4.8 TB/s, 141 GB)"),
    "a100": GpuSpec("NVIDIA A100 SXM4 80GB", 80 * 10**9, 2.039e12, 19.5e12, 156e12, 312e12,
                    "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB: FP32 19.5 TFLOPS, TF32 156 and "
                    "BF16 312 TFLOPS dense; HBM2e 2,039 GB/s)"),
}


def get(name: str) -> GpuSpec:
    spec = GPUS.get(name.lower())
    if spec is None:
        raise ValueError(f"sublinear: unknown GPU {name!r}; give one of {', '.join(sorted(GPUS))}")
    return spec
