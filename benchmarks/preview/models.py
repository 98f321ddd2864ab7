"""Model factories for `sublinear plan --model benchmarks/preview/models.py:NAME` (the
full-scale seed table of docs/benchmarks.md). Each factory takes the batch size and returns
(model, example_inputs); it runs on the meta device, so nothing is initialised or downloaded.

  resnet_<depth>   ImageNet ResNet of bottleneck blocks, depth = 3 x blocks + 2 (resnet_1001:
                   333 blocks; resnet_152 is torchvision's ResNet-152), stages [3, 8, n-14, 3]
                   as ResNet-152's [3, 8, 36, 3]; 224x224 inputs
  vgg19, resnet152, densenet121, densenet264, vit_b_16   torchvision's, 224x224 inputs
  gpt2_124m        GPT-2 small: 12 layers, width 768, 12 heads, vocabulary 50,257, sequence 1,024
                   (the head is not tied to the embedding: 163 M parameters)
  llama_1b         a Llama-style decoder shaped like Llama 3.2 1B (16 layers, width 2,048,
                   32 heads of which 8 key/value, SwiGLU 8,192, RMSNorm, rotary positions,
                   vocabulary 128,256), embedding and head untied (1.5 B parameters),
                   sequence 4,096
"""

from __future__ import annotations

import re

import torch
import torch.nn as nn
import torch.nn.functional as F

IMAGE = (3, 224, 224)


def _image(batch):
    return torch.randn(batch, *IMAGE)


def resnet_depth(depth, batch):
    from torchvision.models.resnet import Bottleneck, ResNet

    blocks = (depth - 2) // 3
    if 3 * blocks + 2 != depth or blocks < 15:
        raise ValueError(f"resnet_{depth}: depth must be 3 x blocks + 2 with at least 15 blocks (50, 152, 1001)")
    return ResNet(Bottleneck, [3, 8, blocks - 14, 3]), _image(batch)


def vgg19(batch):
    import torchvision

    return torchvision.models.vgg19(), _image(batch)


def resnet152(batch):
    import torchvision

    return torchvision.models.resnet152(), _image(batch)


def densenet121(batch):
    import torchvision

    return torchvision.models.densenet121(), _image(batch)


def densenet264(batch):
    from torchvision.models.densenet import DenseNet

    return DenseNet(growth_rate=32, block_config=(6, 12, 64, 48), num_init_features=64), _image(batch)


def vit_b_16(batch):
    import torchvision

    return torchvision.models.vit_b_16(), _image(batch)


class _Block(nn.Module):
    """A pre-norm decoder block: attention (scaled_dot_product_attention, causal) and an MLP."""

    def __init__(self, width, heads, kv_heads, hidden, llama):
        super().__init__()
        self.heads, self.kv_heads, self.llama = heads, kv_heads, llama
        self.head_dim = width // heads
        norm = (lambda: nn.RMSNorm(width)) if llama else (lambda: nn.LayerNorm(width))
        self.norm1, self.norm2 = norm(), norm()
        self.q = nn.Linear(width, width, bias=not llama)
        self.kv = nn.Linear(width, 2 * kv_heads * self.head_dim, bias=not llama)
        self.out = nn.Linear(width, width, bias=not llama)
        if llama:
            self.gate = nn.Linear(width, hidden, bias=False)
            self.up = nn.Linear(width, hidden, bias=False)
            self.down = nn.Linear(hidden, width, bias=False)
        else:
            self.up = nn.Linear(width, hidden)
            self.down = nn.Linear(hidden, width)

    def _rotate(self, x, cos, sin):
        a, b = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-b, a), dim=-1) * sin

    def forward(self, x, cos=None, sin=None):
        b, t, w = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(h).view(b, t, 2, self.kv_heads, self.head_dim).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        if self.llama:
            q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, w))
        h = self.norm2(x)
        if self.llama:
            return x + self.down(F.silu(self.gate(h)) * self.up(h))
        return x + self.down(F.gelu(self.up(h), approximate="tanh"))


class Decoder(nn.Module):
    def __init__(self, layers, width, heads, kv_heads, hidden, vocab, seq, llama):
        super().__init__()
        self.llama = llama
        self.embed = nn.Embedding(vocab, width)
        self.pos = None if llama else nn.Embedding(seq, width)
        self.blocks = nn.ModuleList(_Block(width, heads, kv_heads, hidden, llama) for _ in range(layers))
        self.norm = nn.RMSNorm(width) if llama else nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        if llama:
            head_dim = width // heads
            inv = 1.0 / (500000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))
            angles = torch.outer(torch.arange(seq).float(), inv)
            angles = torch.cat((angles, angles), dim=-1)
            self.register_buffer("cos", angles.cos(), persistent=False)
            self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        if self.pos is not None:
            x = x + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x, self.cos, self.sin) if self.llama else block(x)
        return self.head(self.norm(x))


def gpt2_124m(batch):
    seq = 1024
    return Decoder(12, 768, 12, 12, 3072, 50257, seq, llama=False), torch.randint(0, 50257, (batch, seq))


def llama_1b(batch):
    seq = 4096
    return Decoder(16, 2048, 32, 8, 8192, 128256, seq, llama=True), torch.randint(0, 128256, (batch, seq))


def __getattr__(name):
    match = re.fullmatch(r"resnet_(\d+)", name)
    if match:
        depth = int(match.group(1))
        return lambda batch: resnet_depth(depth, batch)
    raise AttributeError(name)


