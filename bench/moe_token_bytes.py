#!/usr/bin/env python3
"""moe_token_bytes.py: the bytes of weights one decoded token reads from a
GGUF file, counted from the tensor sizes the file declares.

    moe_token_bytes.py MODEL.gguf        prints: BYTES TOTAL_TENSOR_BYTES

A token reads every tensor once (attention, norms, the router, the shared
expert if any, the output matrix), one row of token_embd (all of it when
there is no output.weight: the output is tied to it), and of each stacked
expert tensor (blk.N.ffn_{gate,up,down}_exps) only its n_expert_used
chosen experts' share: size * expert_used_count / expert_count. Sizes come
from each tensor's GGML type (block bytes per block elements) and shape,
as the GGUF spec defines them; the expert counts from
<arch>.expert_count / <arch>.expert_used_count.
"""
import struct
import sys

# ggml type id: (elements per block, bytes per block)
TYPES = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
    8: (32, 34), 9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144),
    13: (256, 176), 14: (256, 210), 15: (256, 292), 20: (32, 18), 23: (256, 136),
    30: (1, 2), 39: (32, 17),
}


class Reader:
    def __init__(self, f):
        self.f = f

    def take(self, fmt):
        n = struct.calcsize("<" + fmt)
        return struct.unpack("<" + fmt, self.f.read(n))

    def string(self):
        (n,) = self.take("Q")
        return self.f.read(n).decode("utf-8", "replace")

    def value(self, t):
        scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?",
                  10: "Q", 11: "q", 12: "d"}
        if t in scalar:
            return self.take(scalar[t])[0]
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("IQ")
            if et in scalar:  # skip a numeric array in one read
                self.f.seek(n * struct.calcsize("<" + scalar[et]), 1)
                return None
            for _ in range(n):
                self.value(et)
            return None
        raise ValueError("unknown GGUF value type %d" % t)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: moe_token_bytes.py MODEL.gguf")
    with open(sys.argv[1], "rb") as f:
        r = Reader(f)
        magic, version, n_tensors, n_kv = r.take("4sIQQ")
        if magic != b"GGUF" or version < 2:
            sys.exit("not a GGUF v2+ file")
        kv = {}
        for _ in range(n_kv):
            key = r.string()
            (t,) = r.take("I")
            kv[key] = r.value(t)
        tensors = []
        for _ in range(n_tensors):
            name = r.string()
            (nd,) = r.take("I")
            dims = r.take("%dQ" % nd)
            t, _off = r.take("IQ")
            if t not in TYPES:
                sys.exit("tensor %s: type %d not in the table" % (name, t))
            elems, nbytes = TYPES[t]
            count = 1
            for d in dims:
                count *= d
            tensors.append((name, dims, count // elems * nbytes))
    arch = kv.get("general.architecture", "")
    n_exp = kv.get(arch + ".expert_count", 0) or 0
    n_used = kv.get(arch + ".expert_used_count", 0) or 0
    names = {n for n, _, _ in tensors}
    total = sum(b for _, _, b in tensors)
    read = 0
    for name, dims, b in tensors:
        if name == "token_embd.weight":
            read += b if "output.weight" not in names else b // dims[1]
        elif "_exps." in name and n_exp > 0:
            read += b * n_used // n_exp
        else:
            read += b
    print(read, total)


if __name__ == "__main__":
    main()
