#!/usr/bin/env python3
"""compare_logits.py: two float32 logit dumps (rows of n_vocab, the layout
of `corral-runner logits`) compared the way issue 13 states fidelity:
cosine of every row, and argmax agreement on every row where the
reference's own top-1/top-2 margin exceeds 0.01 (below that, rounding
differences of either engine may legitimately flip the winner).

  compare_logits.py REF.f32 OURS.f32 N_VOCAB [--min-cos C] [--rows N]

Prints one line; exits 1 when the minimum cosine is under --min-cos or an
argmax differs where the margin says it must not."""
import argparse
import array
import math
import sys


def rows(path, n_vocab):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if len(a) % n_vocab:
        sys.exit(f"{path}: {len(a)} floats is not a multiple of {n_vocab}")
    return [a[i:i + n_vocab] for i in range(0, len(a), n_vocab)]


def cosine(x, y):
    dot = sum(p * q for p, q in zip(x, y))
    nx = math.sqrt(sum(p * p for p in x))
    ny = math.sqrt(sum(q * q for q in y))
    return dot / (nx * ny) if nx and ny else (1.0 if nx == ny else 0.0)


def top2(x):
    order = sorted(range(len(x)), key=lambda i: -x[i])
    return order[0], x[order[0]] - x[order[1]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ref")
    ap.add_argument("ours")
    ap.add_argument("n_vocab", type=int)
    ap.add_argument("--min-cos", type=float, default=0.9999)
    ap.add_argument("--rows", type=int, default=0, help="compare only the first N rows")
    a = ap.parse_args()
    ref, ours = rows(a.ref, a.n_vocab), rows(a.ours, a.n_vocab)
    n = min(len(ref), len(ours))
    if a.rows:
        n = min(n, a.rows)
    if n == 0:
        sys.exit("no rows to compare")
    cos = [cosine(ref[i], ours[i]) for i in range(n)]
    checked = flips = 0
    for i in range(n):
        best, margin = top2(ref[i])
        if margin > 0.01:
            checked += 1
            if top2(ours[i])[0] != best:
                flips += 1
    ok = min(cos) >= a.min_cos and flips == 0
    print(f"rows {n}: cosine min {min(cos):.6f} mean {sum(cos) / n:.6f} "
          f"(need >= {a.min_cos}); argmax checked {checked}, differ {flips} "
          f"-> {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
