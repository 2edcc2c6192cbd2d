"""A stand-in for torch.Tensor in the CPU tests (no PyTorch here): just
the attributes epkit.deep_ep's argument checks read."""


class FakeDtype:
    def __init__(self, name: str, size: int):
        self.name, self.size = name, size

    def __str__(self):
        return f"torch.{self.name}"


DTYPES = {name: FakeDtype(name, size) for name, size in
          (("bfloat16", 2), ("float8_e4m3fn", 1), ("float32", 4), ("int32", 4), ("int64", 8), ("bool", 1),
           ("float16", 2))}


class FakeTensor:
    def __init__(self, shape, dtype: str, contiguous: bool = True, ptr: int = 0x7000_0000):
        self.shape, self.dtype, self._contiguous, self._ptr = tuple(shape), DTYPES[dtype], contiguous, ptr

    def dim(self):
        return len(self.shape)

    def size(self, i=None):
        return self.shape if i is None else self.shape[i]

    def stride(self):
        strides, step = [], 1
        for n in reversed(self.shape):
            strides.insert(0, step)
            step *= n
        return tuple(strides)

    def is_contiguous(self):
        return self._contiguous

    def element_size(self):
        return self.dtype.size

    def data_ptr(self):
        return self._ptr
