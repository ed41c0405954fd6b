#!/usr/bin/env python3
"""Checks a `fabcoll sim --map --table` allreduce map against the claims of thakur §5.4 / Fig 14-15
(and rabenseifner-2004 §4). Usage: compare_thakur.py allreduce-t3e.txt"""
import sys

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size(tok):
    return int(tok[:-1]) * UNITS[tok[-1]] if tok[-1] in UNITS else int(tok)


def load(path):
    """{p: {size: winner}} from the `p=..: a..b name, ...` lines."""
    grid, sizes = {}, set()
    for line in open(path, encoding="utf-8"):
        if not line.startswith("p="):
            continue
        head, runs = line.split(":", 1)
        row = {}
        for run in runs.split(","):
            rng, name = run.split()
            lo, hi = (size(x) for x in rng.split("..")) if ".." in rng else (size(rng),) * 2
            s = lo
            while s <= hi:
                row[s] = name
                s *= 2
        grid[int(head[2:])] = row
        sizes |= set(row)
    return grid, sorted(sizes)


def delta_expo_max(p):
    """Largest gap between consecutive exponents of p's binary digits (0 for a power of two)."""
    e = [i for i in range(p.bit_length()) if p >> i & 1]
    return max((b - a for a, b in zip(e, e[1:])), default=0)


def fmt_ps(ps):
    """[3, 5, 6, 7, 9] -> '3, 5–7, 9'"""
    out, i = [], 0
    while i < len(ps):
        j = i
        while j + 1 < len(ps) and ps[j + 1] == ps[j] + 1:
            j += 1
        out.append(str(ps[i]) if i == j else f"{ps[i]}–{ps[j]}")
        i = j + 1
    return ", ".join(out)


def main(path):
    g, sizes = load(path)
    ps = sorted(g)
    pow2 = lambda p: p & (p - 1) == 0
    print(f"## {path}: {len(ps)} p × {len(sizes)} sizes")

    # 1. <= 32 B: recursive doubling
    bad = sorted({p for p in ps for s in sizes if s <= 32 and g[p][s] != "recursive_doubling"})
    print(f"1. <= 32 B recursive doubling: {'holds everywhere' if not bad else f'fails for p = {fmt_ps(bad)}'}")
    top = {p: max((s for s in sizes if all(g[p][t] == "recursive_doubling" for t in sizes if t <= s)), default=0)
           for p in ps}
    lo, hi = min(top.values()), max(top.values())
    print(f"   recursive doubling wins from the smallest size up to {lo}..{hi} B (per p; median "
          f"{sorted(top.values())[len(ps)//2]} B; 0 = not at the smallest size)")

    # 2. <= 1 KB: binomial tree (reduce_bcast) for non-power-of-two p
    rb = [(p, s) for p in ps for s in sizes if g[p][s] == "reduce_bcast"]
    rb_ps = sorted({p for p, _ in rb})
    print(f"2. binomial tree (reduce_bcast) wins {len(rb)} cells, sizes {min((s for _, s in rb), default=0)}.."
          f"{max((s for _, s in rb), default=0)} B, p = {fmt_ps(rb_ps)}; powers of two among them: "
          f"{[p for p in rb_ps if pow2(p)]}")

    # 3. ring: only p < 32, non-power-of-two, long vectors
    ring_ps = sorted({p for p in ps if "ring" in g[p].values()})
    print(f"3. ring wins somewhere for p = {fmt_ps(ring_ps)}")
    print(f"   of which p >= 32: {sum(p >= 32 for p in ring_ps)}; powers of two: {[p for p in ring_ps if pow2(p)]}")
    for s in (32 << 10, 1 << 20):
        if s in sizes:
            print(f"   ring at {s >> 10} KB: p = {fmt_ps([p for p in ps if g[p][s] == 'ring'])}")

    # 4. binary blocks iff delta < lg(n)/2 - 2.5, n >= 16 KB, p > 32 (non-power-of-two p)
    agree = dis_rule = dis_model = 0
    examples = []
    for p in ps:
        if p <= 32 or pow2(p):
            continue
        d = delta_expo_max(p)
        for s in sizes:
            if s < 16 << 10:
                continue
            rule = d < s.bit_length() / 2 - 0.5 - 2.5  # lg s = bit_length - 1
            model = g[p][s] == "binary_blocks"
            if rule == model:
                agree += 1
            elif rule:
                dis_rule += 1
            else:
                dis_model += 1
                examples.append((p, s))
    n = agree + dis_rule + dis_model
    print(f"4. binary-blocks rule (p > 32 non-pow2, n >= 16 KB): model agrees in {agree}/{n} cells; "
          f"rule says bb but model not: {dis_rule}; model bb but rule not: {dis_model} {examples[:8]}")
    for s in (16 << 10, 32 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20):
        if s not in sizes:
            continue
        by_d = {}
        for p in ps:
            if p > 32 and not pow2(p):
                by_d.setdefault(delta_expo_max(p), []).append(g[p][s] == "binary_blocks")
        row = ", ".join(f"δ={d}: {sum(v)}/{len(v)}" for d, v in sorted(by_d.items()))
        print(f"   {s >> 10:>5} KB, rule: δ < {(s.bit_length() - 1) / 2 - 2.5:.1f}; bb wins for {row}")
    bb_small = sorted({p for p in ps if any(g[p][s] == "binary_blocks" for s in sizes if s < 16 << 10)})
    print(f"   bb also wins below 16 KB for p = {fmt_ps(bb_small)}")

    # 5. halving-doubling at 33 (and 65, 66, 97, 128-131 at 32 KB)
    hd33 = [s for s in sizes if g.get(33, {}).get(s) == "rabenseifner"]
    if hd33:
        print(f"5. p=33 halving-doubling at {min(hd33)}..{max(hd33)} B")
    if 32 << 10 in sizes:
        print("   at 32 KB: " + ", ".join(f"p={p}: {g[p][32 << 10]}" for p in (33, 65, 66, 97, 128) if p in g))
        print("   ring claimed at 32 KB for 3, 5, 7, 9–11, 17: " + ", ".join(
            f"{p}: {g[p][32 << 10]}" for p in (3, 5, 7, 9, 10, 11, 17) if p in g))


if __name__ == "__main__":
    main(sys.argv[1])
