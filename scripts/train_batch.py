"""One fixed training batch for a training plan, as ONNX test data (input_K.pb in the plan's
input order), shared by the training checks (tests/cli/check_train_*.py) and the training
peer benchmark (scripts/bench_peers_train.py)."""
import os

import numpy as np
import onnx
from onnx import numpy_helper


def write_batch(model_path, data, plan=None):
    """A fixed batch in the plan's input order (without a plan: the model's runtime inputs,
    then int64 class labels of the batch): the model's float inputs as seeded uniform values,
    its integer inputs (token ids, masks) from its exported test_data_set_0, then the labels:
    class indices in range, or a seeded float target."""
    rng = np.random.default_rng(5)
    os.makedirs(data, exist_ok=True)
    exported = os.path.join(os.path.dirname(model_path), "test_data_set_0")
    saved = {}
    if os.path.isdir(exported):
        for f in sorted(os.listdir(exported)):
            if f.startswith("input_"):
                t = onnx.load_tensor(os.path.join(exported, f))
                saved[t.name] = numpy_helper.to_array(t)
    m = onnx.load(model_path)
    classes = m.graph.output[0].type.tensor_type.shape.dim[-1].dim_value
    if plan is not None:
        labels_name = plan["training"]["labels"]
        inputs = [(plan["tensors"][i]["name"], plan["tensors"][i]["dtype"], plan["tensors"][i]["shape"])
                  for i in plan["inputs"]]
    else:
        labels_name = "labels"
        init = {i.name for i in m.graph.initializer}
        inputs = [(i.name, "f32", [d.dim_value for d in i.type.tensor_type.shape.dim])
                  for i in m.graph.input if i.name not in init]
        inputs.append((labels_name, "i64", inputs[0][2][:1]))
    for k, (name, dtype, shape) in enumerate(inputs):
        if name == labels_name and dtype == "i64":
            x = (np.arange(int(np.prod(shape)), dtype=np.int64) * 7 + 3).reshape(shape) % classes
        elif dtype == "f32":
            x = rng.uniform(-1, 1, size=shape).astype(np.float32)
        elif name in saved:
            x = saved[name]
            if list(x.shape) != shape:
                raise SystemExit("error: %s: test_data_set_0 holds shape %s, the plan wants %s" % (name, list(x.shape), shape))
        else:
            raise SystemExit("error: no data for the plan's input %s (%s)" % (name, dtype))
        with open(os.path.join(data, "input_%d.pb" % k), "wb") as f:
            f.write(numpy_helper.from_array(x, name).SerializeToString())
