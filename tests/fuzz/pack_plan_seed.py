#!/usr/bin/python3
"""Packs a plan directory into one fuzz_plan input (tests/fuzz/fuzz_plan.cpp, scripts/fuzz.sh):
plan.json, kernels.cu and weights.bin joined by the harness's separator.

  pack_plan_seed.py PLAN_DIR OUT [--short-prelude]

--short-prelude: kernels.cu's prelude section (about 30 KB, the same in every plan, and
opaque to read_plan, which only splices it back into each module) is cut to its first
lines, and plan.json's module byte ranges, sizes and checksums follow, so the plan stays
valid (read_plan accepts it, with or without the harness's '!') and the input is several
times smaller: mutations land in the parts read_plan checks.
"""
import json
import sys

SEP = b"\n@@dc-fuzz-file@@\n"
BEGIN = b"// ===== dc prelude: begin =====\n"
END = b"// ===== dc prelude: end =====\n"
KEEP_LINES = 12


def fnv1a(data):
    h = 14695981039346656037
    for byte in data:
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def shorten(plan_json, kernels, weights):
    begin = kernels.index(BEGIN) + len(BEGIN)
    end = kernels.index(END, begin)
    prelude = kernels[begin:end]
    short = b"".join(prelude.splitlines(keepends=True)[:KEEP_LINES]) + b"// (shortened for a fuzz seed)\n"
    delta = len(prelude) - len(short)
    plan = json.loads(plan_json)
    for module in plan["modules"]:
        assert module["source"]["offset"] >= end, "a module before the prelude's end"
        module["source"]["offset"] -= delta
    kernels = kernels[:begin] + short + kernels[end:]
    plan["files"] = {"kernels.cu": {"bytes": len(kernels), "fnv1a": fnv1a(kernels)},
                     "weights.bin": {"bytes": len(weights), "fnv1a": fnv1a(weights)}}
    # Compact JSON, as dc's reader takes any: smaller still.
    return json.dumps(plan, separators=(",", ":")).encode(), kernels


def main():
    plan_dir, out = sys.argv[1], sys.argv[2]
    files = [open(f"{plan_dir}/{name}", "rb").read() for name in ("plan.json", "kernels.cu", "weights.bin")]
    if "--short-prelude" in sys.argv[3:]:
        files[0], files[1] = shorten(*files)
    with open(out, "wb") as f:
        f.write(SEP.join(files))


if __name__ == "__main__":
    main()
