#!/usr/bin/python3
"""ONNX's backend node tests: every case must pass `verify`, or be refused with one clean
`error:` line (exit 2) that node_tests_unsupported.txt lists for it, word for word.
A wrong answer, a crash, an internal error (exit 3), a refusal the list does not name, or
a listed case that now passes fails the test (regenerate the list with --rewrite and
update docs/onnx-conformance.md).

    run_node_tests.py DC_COORDINATOR CASES_DIR LIST_FILE [--jobs N] [--rewrite]

CASES_DIR is Debian's libonnx-testdata corpus, /usr/share/libonnx-testdata/data/node (all
of ONNX 1.12's node tests); --rewrite writes LIST_FILE from this run's refusals (wrong
answers and crashes still fail)."""
import argparse
import concurrent.futures
import os
import subprocess
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("coord")
ap.add_argument("cases_dir")
ap.add_argument("list_file")
ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
ap.add_argument("--rewrite", action="store_true")
args = ap.parse_args()

if not os.path.isdir(args.cases_dir):
    print(f"FAIL: {args.cases_dir} is missing (scripts/install-deps.sh installs libonnx-testdata)")
    sys.exit(1)

expected = {}
if os.path.exists(args.list_file):
    with open(args.list_file) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            case, reason = line.rstrip("\n").split(None, 1)
            expected[case] = reason


def run_case(case):
    d = os.path.join(args.cases_dir, case)
    r = subprocess.run([args.coord, "verify", os.path.join(d, "model.onnx"), "--data",
                        os.path.join(d, "test_data_set_0")], capture_output=True, text=True, timeout=600)
    errors = [l for l in r.stderr.splitlines() if l.startswith("error:")]
    reason = errors[0][len("error:"):].strip().replace(d, "<case>") if len(errors) == 1 else None
    return case, r, reason


start = time.time()
cases = sorted(d for d in os.listdir(args.cases_dir)
               if d.startswith("test_") and os.path.exists(os.path.join(args.cases_dir, d, "model.onnx")))
passed, refused, failures, new_list = 0, 0, [], {}
with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
    for case, r, reason in pool.map(run_case, cases):
        if r.returncode == 0 and "verify: PASS" in r.stdout:
            passed += 1
            if case in expected and not args.rewrite:
                failures.append(f"{case}: passes now but is listed as refused ({expected[case]})")
            continue
        if r.returncode == 2 and reason is not None:
            new_list[case] = reason
            if args.rewrite or expected.get(case) == reason:
                refused += 1
                continue
            why = "not listed" if case not in expected else f"listed as '{expected[case]}'"
            failures.append(f"{case}: refused with '{reason}', {why}")
            continue
        detail = r.stdout.strip().splitlines()[-3:] + r.stderr.strip().splitlines()[-2:]
        failures.append(f"{case}: exit {r.returncode}: " + " | ".join(detail))

if args.rewrite:
    with open(args.list_file, "w") as f:
        f.write("# ONNX backend node tests (Debian libonnx-testdata, ONNX 1.12) that dc refuses, with\n"
                "# the exact `error:` line. Generated: tests/cli/run_node_tests.py ... --rewrite\n")
        for case in sorted(new_list):
            f.write(f"{case} {new_list[case]}\n")
    print(f"rewrote {args.list_file}: {len(new_list)} refused cases")

for f in failures:
    print("FAIL", f)
print(f"{len(cases)} cases: {passed} pass verify, {refused} refused as listed, {len(failures)} failing "
      f"({time.time() - start:.0f} s, {args.jobs} jobs)")
sys.exit(1 if failures else 0)
