#!/usr/bin/python3
"""`plan --json` on a model: the chosen clusters cover every node exactly once, the total is
the sum of the chosen workloads' best estimates, pruning respects --top-k, every estimate is
at least the workload's floor, and the candidates include the patterns the model must show.

    check_plan.py COORD MODEL GPUS [PATTERN ...]"""
import json
import subprocess
import sys

coord, model, gpus, *patterns = sys.argv[1:]
r = subprocess.run([coord, "plan", model, "--gpus", gpus, "--json", "--top-k", "8"],
                   capture_output=True, text=True, timeout=600)
assert r.returncode == 0, r.stderr
plan = json.loads(r.stdout)
assert plan["format"] == "dc-plan-estimate/1"
cands = plan["candidates"]
workloads = {w["signature"]: w for w in plan["workloads"]}
all_nodes = set()
for c in cands:
    all_nodes.update(c["nodes"])
assert len(all_nodes) == plan["nodes"], (len(all_nodes), plan["nodes"])
singletons = {c["nodes"][0] for c in cands if len(c["nodes"]) == 1}
assert singletons == all_nodes, "a node lacks its singleton candidate"
have = {c["pattern"] for c in cands}
for p in patterns:
    assert p in have, f"no candidate '{p}'; have e.g. {sorted(have)[:30]}"
assert [g["gpu"] for g in plan["gpus"]] == gpus.split(",")

for g in plan["gpus"]:
    per_sig = {w["signature"]: w for w in g["workloads"]}
    assert set(per_sig) == set(workloads)
    covered = []
    total = 0.0
    for cid in g["chosen"]:
        c = cands[cid]
        covered += c["nodes"]
        if not c.get("free_view"):  # the plan makes it a view: no kernel, no time
            total += per_sig[c["workload"]]["kept"][0]["estimate"]["seconds"]
    assert sorted(covered) == sorted(all_nodes), f"{g['gpu']}: cover is not exact"
    assert abs(total - g["estimated_seconds"]) <= 1e-9 + 1e-6 * total, (total, g["estimated_seconds"])
    for w in g["workloads"]:
        assert 1 <= w["variants_kept"] <= min(8, w["variants_total"]), w["signature"]
        secs = [k["estimate"]["seconds"] for k in w["kept"]]
        assert secs == sorted(secs), "kept variants are not sorted by estimate"
        assert secs[-1] <= 1.5 * secs[0] * (1 + 1e-9), "pruning kept a variant beyond 1.5x the best"
    # Singletons only must never beat the chosen cover (it is the least-cost cover).
    single = sum(per_sig[c["workload"]]["kept"][0]["estimate"]["seconds"]
                 for c in cands if len(c["nodes"]) == 1)
    assert g["estimated_seconds"] <= single * (1 + 1e-9), (g["estimated_seconds"], single)
    print(f"{g['gpu']}: {len(g['chosen'])} kernels, estimated {g['estimated_seconds']*1e6:.1f} us "
          f"(all singletons {single*1e6:.1f} us)")

bad = subprocess.run([coord, "plan", model, "--gpus", "x100"], capture_output=True, text=True)
assert bad.returncode == 2 and "h100" in bad.stderr and "x100" in bad.stderr, bad.stderr
print(f"plan OK: {len(cands)} candidates, {len(workloads)} workloads")
