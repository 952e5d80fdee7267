#!/usr/bin/python3
"""A command that must fail in a stated way: `expect_failure.py CODE PATTERN -- CMD...` runs
CMD and passes only when it exits with CODE (not merely non-zero: a crash, an internal
error or a usage error must not pass for the failure the test is about) and its stderr
holds one line matching the regular expression PATTERN."""
import re
import subprocess
import sys


def main():
    if len(sys.argv) < 5 or sys.argv[3] != "--":
        sys.exit("usage: expect_failure.py CODE PATTERN -- CMD...")
    code, pattern, cmd = int(sys.argv[1]), re.compile(sys.argv[2]), sys.argv[4:]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    print(f"$ {' '.join(cmd)}\nexit {p.returncode}\nstdout: {p.stdout!r}\nstderr: {p.stderr!r}")
    if p.returncode != code:
        sys.exit(f"FAIL: expected exit {code}, got {p.returncode}")
    if not any(pattern.search(l) for l in lines):
        sys.exit(f"FAIL: no stderr line matches {pattern.pattern!r}")
    print("PASS")


if __name__ == "__main__":
    main()
