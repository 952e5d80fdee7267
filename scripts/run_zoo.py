#!/usr/bin/python3
"""Runs the zoo (scripts/make_zoo.py) end to end: for each model `verify` on the CPU
reference, a quick emulated `tune` that writes a plan, and `dc-run --emulate --data` of
that plan, each against PyTorch's outputs.

    scripts/run_zoo.py ZOO_DIR [--models a,b] [--coord build/bin/dc-coordinator]
                       [--dc-run build/bin/dc-run] [--expect tests/zoo_expected.txt]
                       [--rewrite] [--markdown FILE]

Every model either passes all three stages or is refused by `verify` with one clean
`error:` line (exit 2), and by `tune` with the same line. With --expect, the outcome of each model must be the one listed
(`pass`, or the exact refusal line); --rewrite writes the list from this run instead
(crashes, internal errors and wrong answers still fail). --markdown writes the table of
docs/zoo.md."""
import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(cmd, timeout=3600):
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr, time.time() - t0
    except subprocess.TimeoutExpired:
        return 124, "", "timed out", time.time() - t0


def error_line(stderr):
    lines = [l for l in stderr.splitlines() if l.startswith("error:")]
    return lines[0][len("error:"):].strip() if len(lines) == 1 else None


def ops_of(model_path):
    import collections
    import onnx
    m = onnx.load(model_path)
    c = collections.Counter(n.op_type for n in m.graph.node if n.op_type not in ("Constant", "Identity"))
    opset = next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
    return opset, ", ".join(op for op, _ in c.most_common())


def run_model(a, zoo, name, tmp):
    d = os.path.join(zoo, name)
    model, data = os.path.join(d, "model.onnx"), os.path.join(d, "test_data_set_0")
    opset, ops = ops_of(model)
    row = {"model": name, "opset": opset, "ops": ops, "verify": "-", "tune": "-", "run": "-", "time": 0.0}
    t_start = time.time()

    def done(outcome, ok):
        row["time"] = time.time() - t_start
        row["outcome"], row["ok"] = outcome, ok
        return row

    rc, out, err, t = run([a.coord, "verify", model, "--data", data])
    if rc == 2 and error_line(err):
        row["verify"] = "refused"
        # tune refuses it the same way: one error line, exit 2, nothing measured
        rc2, _, err2, _ = run([a.coord, "tune", model, "--gpus", a.gpu, "--emulate", "--db", ":memory:"])
        if rc2 != 2 or error_line(err2) != error_line(err):
            return done(f"verify refuses with '{error_line(err)}' but tune exits {rc2}: {err2[-300:]}", False)
        return done(error_line(err), True)
    if rc != 0 or "verify: PASS" not in out:
        row["verify"] = f"FAIL ({rc})"
        return done(f"verify exit {rc}: {(out + err)[-400:]}", False)
    row["verify"] = f"pass {t:.1f} s"
    out_dir = os.path.join(tmp, name)
    rc, out, err, t = run([a.coord, "tune", model, "--gpus", a.gpu, "--config", a.config, "--emulate",
                           "--db", os.path.join(tmp, name + ".db"), "--out", out_dir, "--local-workers", "2"])
    if rc != 0:
        row["tune"] = f"FAIL ({rc})"
        return done(f"tune exit {rc}: {(out + err)[-400:]}", False)
    row["tune"] = f"pass {t:.1f} s"
    rc, out, err, t = run([a.dc_run, os.path.join(out_dir, a.gpu), "--emulate", "--data", data])
    if rc != 0 or "dc-run: PASS" not in out:
        row["run"] = f"FAIL ({rc})"
        return done(f"dc-run exit {rc}: {(out + err)[-400:]}", False)
    row["run"] = f"pass {t:.1f} s"
    return done("pass", True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("zoo")
    ap.add_argument("--models", default="")
    ap.add_argument("--coord", default=os.path.join(ROOT, "build", "bin", "dc-coordinator"))
    ap.add_argument("--dc-run", default=os.path.join(ROOT, "build", "bin", "dc-run"))
    ap.add_argument("--config", default=os.path.join(ROOT, "examples", "tune-quick.yaml"))
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--expect", default="")
    ap.add_argument("--rewrite", action="store_true")
    ap.add_argument("--markdown", default="")
    a = ap.parse_args()
    names = [n for n in a.models.split(",") if n] or sorted(
        n for n in os.listdir(a.zoo) if os.path.isfile(os.path.join(a.zoo, n, "model.onnx")))
    expected = {}
    if a.expect and os.path.exists(a.expect):
        for line in open(a.expect):
            if line.strip() and not line.startswith("#"):
                k, v = line.rstrip("\n").split(None, 1)
                expected[k] = v
    rows, failures = [], []
    with tempfile.TemporaryDirectory(prefix="dc_zoo_") as tmp:
        for n in names:
            r = run_model(a, a.zoo, n, tmp)
            rows.append(r)
            print(f"{n}: {r['outcome']} (verify {r['verify']}, tune {r['tune']}, run {r['run']}, "
                  f"{r['time']:.1f} s)", flush=True)
            if not r["ok"]:
                failures.append(f"{n}: {r['outcome']}")
            elif a.expect and not a.rewrite and expected.get(n) != r["outcome"]:
                failures.append(f"{n}: '{r['outcome']}', listed as '{expected.get(n, '(not listed)')}'")
    if a.rewrite and a.expect:
        for r in rows:
            if r["ok"]:
                expected[r["model"]] = r["outcome"]
        with open(a.expect, "w") as f:
            f.write("# The zoo's expected outcomes (scripts/run_zoo.py --rewrite): pass, or the exact refusal.\n")
            for k in sorted(expected):
                f.write(f"{k} {expected[k]}\n")
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write("| model | opset | ops | verify | tune (emulated) | dc-run --emulate | time |\n")
            f.write("| --- | --- | --- | --- | --- | --- | --- |\n")
            for r in rows:
                verify = r["verify"] if r["verify"] != "refused" else f"refused: `{r['outcome']}`"
                f.write(f"| {r['model']} | {r['opset']} | {r['ops']} | {verify} | {r['tune']} | {r['run']} | "
                        f"{r['time']:.0f} s |\n")
    for f_ in failures:
        print("FAIL", f_)
    print(f"{len(rows)} models: {sum(r['outcome'] == 'pass' for r in rows)} pass end to end, "
          f"{sum(r['verify'] == 'refused' for r in rows)} refused, {len(failures)} failing")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
