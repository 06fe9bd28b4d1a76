"""Gradient compression as horovod.torch.Compression: a compressor turns a tensor into what goes on
the wire (compress -> (tensor, ctx)) and back (decompress(tensor, ctx))."""
import torch


class Compressor:
    """The interface: compress(tensor) -> (wire tensor, ctx); decompress(wire tensor, ctx)."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """The tensor as it is."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _CastCompressor(Compressor):
    """Floating-point tensors travel as `wire` (half the bytes of float32); others as they are.
    The reduction runs in the wire type, as Horovod's fp16 compression does."""

    wire = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != cls.wire:
            return tensor.to(cls.wire), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)


class FP16Compressor(_CastCompressor):
    wire = torch.float16


class BF16Compressor(_CastCompressor):
    """prioccl's addition: bfloat16 keeps float32's exponent range, so large gradients do not
    overflow to inf as they can in float16."""

    wire = torch.bfloat16


class Compression:
    """The compressors by name: Compression.none, Compression.fp16, Compression.bf16."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
