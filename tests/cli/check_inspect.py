#!/usr/bin/python3
"""inspect on a model: the text form names every input and output, and the --json form is
valid JSON whose op counts agree with the ONNX file (read independently with onnx)."""
import collections
import json
import subprocess
import sys

import onnx
import onnx.numpy_helper

coord, model_path = sys.argv[1], sys.argv[2]
model = onnx.load(model_path)
inits = {t.name for t in model.graph.initializer}
inputs = [i.name for i in model.graph.input if i.name not in inits]
outputs = [o.name for o in model.graph.output]
onnx_counts = collections.Counter(n.op_type for n in model.graph.node)

text = subprocess.run([coord, "inspect", model_path], capture_output=True, text=True, timeout=120)
assert text.returncode == 0, text.stderr
for name in inputs + outputs:
    assert name in text.stdout, f"inspect does not name {name}:\n{text.stdout}"
assert "FLOPs" in text.stdout and "parameters" in text.stdout, text.stdout

js = subprocess.run([coord, "inspect", model_path, "--json"], capture_output=True, text=True, timeout=120)
assert js.returncode == 0, js.stderr
info = json.loads(js.stdout)
assert [i["name"] for i in info["inputs"]] == inputs, info["inputs"]
assert [o["name"] for o in info["outputs"]] == outputs, info["outputs"]
got = {op: c["imported"] for op, c in info["op_counts"].items() if c["imported"]}
assert got == dict(onnx_counts), f"op counts {got} != onnx's {dict(onnx_counts)}"
assert info["nodes"]["imported"] == len(model.graph.node)
assert info["nodes"]["simplified"] <= info["nodes"]["imported"]
params = sum(int(onnx.numpy_helper.to_array(t).size) for t in model.graph.initializer)
assert info["parameters"] <= params + 1000 and info["parameters"] > 0, (info["parameters"], params)
assert info["flops"] > 0
print(f"inspect OK: {len(inputs)} inputs, {len(outputs)} outputs, "
      f"{info['nodes']['imported']} -> {info['nodes']['simplified']} nodes, {info['flops']} FLOPs")
