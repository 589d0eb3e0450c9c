"""Development probe: Nsight Compute's SASS source page (``ncu --import R --page source --csv
--print-source sass``) summarized: runs of consecutive instructions executed equally often
(a loop body, a block's set-up) with their share of the kernel's instructions and of the warp
stall samples, and their most frequent opcodes.

    python3 tools/sass_groups.py SASS.csv [MIN_SHARE]
"""
import csv
import sys


def num(v):
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    rows = list(csv.reader(open(sys.argv[1])))
    least = float(sys.argv[2]) if len(sys.argv) > 2 else 0.005
    start = next(i for i, r in enumerate(rows) if "Source" in r and "Address" in r)
    hdr, data = rows[start], rows[start + 1:]
    src, ex = hdr.index("Source"), hdr.index("Instructions Executed")
    samp = hdr.index("Warp Stall Sampling (All Samples)")
    total = sum(num(r[ex]) for r in data) or 1.0
    stalls = sum(num(r[samp]) for r in data) or 1.0
    print(f"{total:.0f} warp instructions, {stalls:.0f} stall samples")
    groups = []
    for r in data:
        e = num(r[ex])
        if groups and groups[-1][1] == e:
            groups[-1][2].append(r)
        else:
            groups.append([r[0], e, [r]])
    for addr, e, rs in groups:
        if e * len(rs) < total * least:
            continue
        ops = {}
        for x in rs:
            words = x[src].split()
            op = (words[1] if words and words[0].startswith("@") and len(words) > 1
                  else words[0] if words else "").split(".")[0]
            ops[op] = ops.get(op, 0) + 1
        top = ", ".join(f"{k} {v}" for k, v in sorted(ops.items(), key=lambda t: -t[1])[:9])
        print(f"{addr[-5:]} n={len(rs):4d} exec={e:11.0f} instr {e * len(rs) / total:6.1%} "
              f"stalls {sum(num(x[samp]) for x in rs) / stalls:6.1%}  {top}")


if __name__ == "__main__":
    main()
