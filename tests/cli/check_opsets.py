#!/usr/bin/python3
"""Opsets ONNX 1.12 cannot check by itself: an opset-1 model in the old zoo layout (through
ONNX's version converter) and opset-18/21 models (lowered to opset 17 at import) must pass
`verify` against outputs computed in numpy from the ops' definitions; the opset-18 model
declared opset 22 and 23 (whose changes leave these ops' meaning alone) verifies too; opset
24 must be refused with one clear error line, and so must opset 23's Attention with a KV
cache or softcap.
    check_opsets.py DC_COORDINATOR REPO_ROOT"""
import os
import subprocess
import sys
import tempfile

coord, root = sys.argv[1:3]
failures = []
with tempfile.TemporaryDirectory() as tmp:
    subprocess.run(["/usr/bin/python3", os.path.join(root, "scripts", "make_opset_models.py"), tmp],
                   check=True, capture_output=True)
    for case in ("opset1_cnn", "opset18", "opset21"):
        d = os.path.join(tmp, case)
        r = subprocess.run([coord, "verify", os.path.join(d, "model.onnx"), "--data",
                            os.path.join(d, "test_data_set_0")], capture_output=True, text=True)
        ok = r.returncode == 0 and "verify: PASS" in r.stdout
        print(f"{case}: {'PASS' if ok else 'FAIL'}")
        if not ok:
            failures.append(f"{case}: exit {r.returncode}: {r.stdout[-300:]} {r.stderr[-300:]}")
    import onnx
    m = onnx.load(os.path.join(tmp, "opset18", "model.onnx"))
    data = os.path.join(tmp, "opset18", "test_data_set_0")
    for version in (22, 23):
        m.opset_import[0].version = version
        p = os.path.join(tmp, f"opset{version}.onnx")
        onnx.save(m, p)
        r = subprocess.run([coord, "verify", p, "--data", data], capture_output=True, text=True)
        ok = r.returncode == 0 and "verify: PASS" in r.stdout
        print(f"opset{version}: {'PASS' if ok else 'FAIL'}")
        if not ok:
            failures.append(f"opset{version}: exit {r.returncode}: {r.stdout[-300:]} {r.stderr[-300:]}")
    # Opset 24 is beyond what import adapts: one error line naming the opset, exit 2.
    m.opset_import[0].version = 24
    p = os.path.join(tmp, "opset24.onnx")
    onnx.save(m, p)
    r = subprocess.run([coord, "inspect", p], capture_output=True, text=True)
    errors = [l for l in r.stderr.splitlines() if l.startswith("error:")]
    if r.returncode != 2 or len(errors) != 1 or "opset 24" not in errors[0]:
        failures.append(f"opset24: expected exit 2 and one error line naming opset 24, got {r.returncode}: {r.stderr}")
    # Opset 23's Attention in forms its node chain cannot express: one error line naming the
    # node and the reason, exit 2.
    from onnx import TensorProto, helper
    def attention_model(extra_inputs, **attrs):
        q = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 2, 4, 8]) for n in ("q", "k", "v")]
        past = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 2, 3, 8]) for n in extra_inputs]
        ins = ["q", "k", "v"] + ([""] + extra_inputs if extra_inputs else [])
        node = helper.make_node("Attention", ins, ["y"], name="attn", **attrs)
        g = helper.make_graph([node], "a", q + past, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 8])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
        m.ir_version = 10
        return m
    for case, model, needle in (("kv_cache", attention_model(["past_key", "past_value"]), "KV cache"),
                                ("softcap", attention_model([], softcap=30.0), "softcap")):
        p = os.path.join(tmp, f"attention_{case}.onnx")
        onnx.save(model, p)
        r = subprocess.run([coord, "inspect", p], capture_output=True, text=True)
        errors = [l for l in r.stderr.splitlines() if l.startswith("error:")]
        ok = r.returncode == 2 and len(errors) == 1 and "'attn' (Attention, opset 23)" in errors[0] and needle in errors[0]
        print(f"attention_{case}: {'refused' if ok else 'FAIL'}")
        if not ok:
            failures.append(f"attention_{case}: expected exit 2 and one error naming the node and {needle!r}, "
                            f"got {r.returncode}: {r.stderr}")
for f in failures:
    print("FAIL", f)
sys.exit(1 if failures else 0)
