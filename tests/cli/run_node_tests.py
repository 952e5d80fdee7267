#!/usr/bin/python3
"""ONNX's node conformance cases: every case must pass `verify`, or be refused with a clear
'unsupported' error when it is listed in node_tests_unsupported.txt (with the reason).
A wrong answer, a crash, or a refusal of a case that is not listed fails the test; so does
a listed case that now passes (update the list and docs/onnx-conformance.md)."""
import os
import subprocess
import sys

coord, cases_dir, unsupported_file = sys.argv[1:4]
if not os.path.isdir(cases_dir):
    print(f"FAIL: {cases_dir} is missing (CI has ../shared beside the checkout)")
    sys.exit(1)
expected_unsupported = {}
with open(unsupported_file) as f:
    for line in f:
        line = line.split("#", 1)[0].strip()
        if line:
            case, reason = line.split(None, 1)
            expected_unsupported[case] = reason

passed = refused = 0
failures = []
cases = sorted(d for d in os.listdir(cases_dir) if d.startswith("test_"))
for case in cases:
    d = os.path.join(cases_dir, case)
    r = subprocess.run([coord, "verify", os.path.join(d, "model.onnx"), "--data",
                        os.path.join(d, "test_data_set_0")], capture_output=True, text=True, timeout=300)
    err = r.stderr.strip().splitlines()
    if r.returncode == 0:
        passed += 1
        if case in expected_unsupported:
            failures.append(f"{case}: passes now but is listed as unsupported")
        continue
    if r.returncode == 2 and "unsupported" in r.stderr and case in expected_unsupported:
        refused += 1
        continue
    detail = r.stdout.strip().splitlines()[-3:] + err[-2:]
    failures.append(f"{case}: exit {r.returncode}: " + " | ".join(detail))

for f in failures:
    print("FAIL", f)
print(f"{len(cases)} cases: {passed} pass verify, {refused} refused as unsupported (listed), "
      f"{len(failures)} failing")
print(f"{passed + refused} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
