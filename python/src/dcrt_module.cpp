// dc._dcrt: the Python binding of libdcrt's C API (codegen/plan_runtime/dcrt.h) and nothing else,
// so that the package uses the ABI applications use. The Python layer (dc/session.py)
// turns arrays into bytes and back; this file only moves bytes and statuses.
//
// Every failing call raises dc._dcrt.Error(status_name, message) with libdcrt's one-line
// message. No C++ exception escapes into the interpreter: pybind11 converts them.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "dcrt.h"
#include "dlpack_view.h"

namespace py = pybind11;

namespace {

// Raised for every status other than DCRT_OK; Python subclasses pick it by .status.
py::object& error_type() {
  static py::object type;
  return type;
}

[[noreturn]] void raise(dcrt_status status) {
  PyErr_SetObject(error_type().ptr(),
                  py::make_tuple(dcrt_status_name(status), dcrt_last_error()).ptr());
  throw py::error_already_set();
}

void check(dcrt_status status) {
  if (status != DCRT_OK) raise(status);
}

py::dict info_dict(const dcrt_tensor_info& info) {
  py::dict d;
  d["name"] = info.name;
  d["dtype"] = info.dtype;
  py::list shape;
  for (int i = 0; i < info.rank; ++i) shape.append(info.dims[i]);
  d["shape"] = py::tuple(shape);
  d["bytes"] = info.bytes;
  return d;
}

// A contiguous buffer of a Python object (numpy array, bytes, memoryview).
struct Buffer {
  Py_buffer view{};
  Buffer(py::handle obj, bool writable) {
    if (PyObject_GetBuffer(obj.ptr(), &view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) != 0)
      throw py::error_already_set();
  }
  ~Buffer() { PyBuffer_Release(&view); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

class Plan {
 public:
  Plan(const std::string& dir, bool emulate, int device, const std::string& cache_dir) {
    dcrt_options o = dcrt_default_options();
    o.emulate = emulate ? 1 : 0;
    o.device = device;
    o.cache_dir = cache_dir.empty() ? nullptr : cache_dir.c_str();
    dcrt_plan* p = nullptr;
    dcrt_status s;
    {
      py::gil_scoped_release release;  // loading compiles kernels: seconds
      s = dcrt_load(dir.c_str(), &o, &p);
    }
    check(s);
    plan_ = p;
  }
  ~Plan() { close(); }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  void close() {
    dcrt_free(plan_);
    plan_ = nullptr;
  }

  dcrt_plan* get() const {
    if (plan_ == nullptr) {
      PyErr_SetString(PyExc_ValueError, "the session is closed");
      throw py::error_already_set();
    }
    return plan_;
  }

  py::list infos(bool outputs) const {
    size_t n = 0;
    check(outputs ? dcrt_num_outputs(get(), &n) : dcrt_num_inputs(get(), &n));
    py::list out;
    for (size_t i = 0; i < n; ++i) {
      dcrt_tensor_info info{};
      check(outputs ? dcrt_output_info(get(), i, &info) : dcrt_input_info(get(), i, &info));
      out.append(info_dict(info));
    }
    return out;
  }

  void set_input(size_t index, py::handle data) {
    Buffer b(data, false);
    check(dcrt_set_input(get(), index, b.view.buf, static_cast<size_t>(b.view.len)));
  }

  void run() {
    dcrt_plan* p = get();
    dcrt_status s;
    {
      py::gil_scoped_release release;
      s = dcrt_run(p);
    }
    check(s);
  }

  void get_output(size_t index, py::handle data) const {
    Buffer b(data, true);
    check(dcrt_get_output(get(), index, b.view.buf, static_cast<size_t>(b.view.len)));
  }

  bool is_training() const {
    int t = 0;
    check(dcrt_is_training(get(), &t));
    return t != 0;
  }

  void train_step() {
    dcrt_plan* p = get();
    dcrt_status s;
    {
      py::gil_scoped_release release;
      s = dcrt_train_step(p);
    }
    check(s);
  }

  py::list states() const {
    size_t n = 0;
    check(dcrt_num_states(get(), &n));
    py::list out;
    for (size_t i = 0; i < n; ++i) {
      dcrt_tensor_info info{};
      check(dcrt_state_info(get(), i, &info));
      out.append(info_dict(info));
    }
    return out;
  }

  void get_state(size_t index, py::handle data) const {
    Buffer b(data, true);
    check(dcrt_get_state(get(), index, b.view.buf, static_cast<size_t>(b.view.len)));
  }

  void set_state(size_t index, py::handle data) {
    Buffer b(data, false);
    check(dcrt_set_state(get(), index, b.view.buf, static_cast<size_t>(b.view.len)));
  }

  std::vector<double> time_runs(int warmup, int runs) {
    if (runs < 1) runs = 1;  // libdcrt refuses it with its own message below
    std::vector<double> samples(static_cast<size_t>(runs));
    dcrt_plan* p = get();
    dcrt_status s;
    {
      py::gil_scoped_release release;
      s = dcrt_time_runs(p, warmup, runs, samples.data());
    }
    check(s);
    return samples;
  }

  std::string device_description() const {
    const char* d = nullptr;
    check(dcrt_device_description(get(), &d));
    return d;
  }

  std::vector<std::string> warnings() const {
    size_t n = 0;
    check(dcrt_num_warnings(get(), &n));
    std::vector<std::string> out;
    for (size_t i = 0; i < n; ++i) {
      const char* m = nullptr;
      check(dcrt_warning(get(), i, &m));
      out.emplace_back(m);
    }
    return out;
  }

  // Zero-copy: DLPack capsules viewing the plan's own device buffers (dlpack_view.h). The
  // caller copies its CUDA tensor into the input's view (device to device) and clones the
  // output's view; the views must not outlive the plan.
  py::object input_device_view(size_t index, int device) {
    void* ptr = nullptr;
    check(dcrt_input_device_buffer(get(), index, &ptr));
    dcrt_tensor_info info{};
    check(dcrt_input_info(get(), index, &info));
    return dlpack_cuda_view(ptr, device, info);
  }

  py::object output_device_view(size_t index, int device) const {
    const void* ptr = nullptr;
    check(dcrt_output_device_buffer(get(), index, &ptr));
    dcrt_tensor_info info{};
    check(dcrt_output_info(get(), index, &info));
    return dlpack_cuda_view(const_cast<void*>(ptr), device, info);
  }

 private:
  dcrt_plan* plan_ = nullptr;
};

}  // namespace

PYBIND11_MODULE(_dcrt, m) {
  m.doc() = "libdcrt's C API (dcrt.h); use dc.Session instead";
  error_type() = py::reinterpret_steal<py::object>(
      PyErr_NewException("dc._dcrt.Error", PyExc_RuntimeError, nullptr));
  m.attr("Error") = error_type();

  py::class_<Plan>(m, "Plan")
      .def(py::init<const std::string&, bool, int, const std::string&>(), py::arg("dir"),
           py::arg("emulate"), py::arg("device"), py::arg("cache_dir"))
      .def("close", &Plan::close)
      .def("inputs", [](const Plan& p) { return p.infos(false); })
      .def("outputs", [](const Plan& p) { return p.infos(true); })
      .def("set_input", &Plan::set_input)
      .def("run", &Plan::run)
      .def("get_output", &Plan::get_output)
      .def("time_runs", &Plan::time_runs)
      .def("is_training", &Plan::is_training)
      .def("train_step", &Plan::train_step)
      .def("states", &Plan::states)
      .def("get_state", &Plan::get_state)
      .def("set_state", &Plan::set_state)
      .def("device_description", &Plan::device_description)
      .def("warnings", &Plan::warnings)
      .def("input_device_view", &Plan::input_device_view)
      .def("output_device_view", &Plan::output_device_view);
}
