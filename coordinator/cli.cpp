#include "cli.h"

#include <iostream>

#include <boost/program_options.hpp>
#include <spdlog/spdlog.h>

#include "ir/cli_guard.h"
#include "ir/error.h"
#include "ir/log.h"
#include "ir/parse_subcommand.h"
#include "onnx/import.h"
#include "tune_config.h"

namespace dc::cli {

namespace po = boost::program_options;

namespace {

constexpr const char* kUsage = R"(usage: dc-coordinator [--log-level LEVEL] COMMAND [options]

dc: a fusion-aware deep-learning compiler run as a distributed autotuning service.

commands:
  inspect MODEL.onnx [--json]             inputs, outputs, op counts, parameters, FLOPs
  verify  MODEL.onnx --data DIR           run the CPU reference executor on an ONNX
                                          test-data folder and compare the outputs
  plan    MODEL.onnx --gpus h100,a100     candidate clusters, variants and estimates per
          [--precision fp32|tf32|fp16|bf16]
                                          GPU type; the cover with the least estimated time
  codegen MODEL.onnx --gpus h100 --out DIR
                                          write the kept variants' CUDA sources, launch
                                          descriptions and NVRTC compile reports
  tune    MODEL.onnx --gpus h100 [--db PATH] [--out DIR] [--bind tcp://ADDR:PORT]
          [--local-workers N] [--emulate] [--config FILE] [--retune] [--precision P]
          [--farm tcp://HOST:PORT [--priority N]]
                                          measure the variants on a farm (results kept in
                                          the tuning DB and reused) and select, per GPU
                                          type, the cover with the least measured time
  keygen  PATH                            write a CURVE key pair for the farm
  serve   --bind tcp://ADDR:PORT --db PATH [--keys FILE] [--allow-workers FILE]
          [--allow-clients FILE]          the farm as a long-lived service owning the
                                          tuning DB: workers connect to it, tunes use it
                                          with `tune --farm tcp://HOST:PORT [--priority N]`
  status  --farm tcp://HOST:PORT [--json] a farm service's workers, tunes and queues

plan, codegen and tune build a plan of one precision (--precision, default fp32): tf32
uses TF32 tensor cores on f32 tensors; fp16/bf16 store tensors in that type and use tensor
cores with fp32 accumulation (README, docs/precision.md).

Run `dc-coordinator COMMAND --help` for a command's options.

global options:
  --log-level LEVEL   trace, debug, info, warn (default), error, off
  -v, --verbose       same as --log-level debug (shows every pass with node counts)
  --version           print the version
  -h, --help          this text
)";

}  // namespace

std::map<std::string, Shape> parse_shape_flags(const std::vector<std::string>& flags) {
  std::map<std::string, Shape> out;
  for (const auto& f : flags) {
    const auto eq = f.rfind('=');
    DC_USER_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < f.size(), "bad --shape '", f,
                  "': expected NAME=DIMS, e.g. --shape input=1x3x224x224");
    out[f.substr(0, eq)] = parse_shape(f.substr(eq + 1));
  }
  return out;
}

void add_precision_options(po::options_description& desc) {
  desc.add_options()
      ("precision", po::value<std::string>(), "the plan's precision: fp32 (default), tf32 (TF32 "
       "tensor cores, f32 tensors), fp16 or bf16 (f16/bf16 storage, tensor cores with fp32 "
       "accumulation); docs/precision.md")
      ("precisions", po::value<std::string>(), "deprecated spelling of --precision (one value)");
}

void read_precision_options(const po::variables_map& vm, PlanOptions* opts,
                            const std::vector<const GpuSpec*>& gpus) {
  DC_USER_CHECK(!(vm.count("precision") && vm.count("precisions")),
                "give --precision only (--precisions is its deprecated spelling)");
  if (vm.count("precision"))
    set_plan_precision(opts, parse_precision(vm["precision"].as<std::string>()));
  if (vm.count("precisions"))
    set_plan_precision(opts, precision_from_deprecated_list(
                                 split_list(vm["precisions"].as<std::string>()), "--precisions"));
  check_gpus_have_precision(gpus, opts->precision);
}

std::optional<po::variables_map> parse_command(const std::vector<std::string>& args,
                                               const po::options_description& desc,
                                               std::string* model) {
  return parse_subcommand(args, desc, "model", model);
}

int run(int argc, char** argv) {
  return run_guarded([&]() -> int {
    // Global options stop at the first positional (the command); the rest is the command's.
    std::string log_level = "warn";
    int i = 1;
    for (; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "-h" || a == "--help") {
        std::cout << kUsage;
        return kExitOk;
      } else if (a == "--version") {
        std::cout << "dc-coordinator " << DC_VERSION << "\n";
        return kExitOk;
      } else if (a == "-v" || a == "--verbose") {
        log_level = "debug";
      } else if (a == "--log-level") {
        DC_USER_CHECK(i + 1 < argc, "--log-level needs a value");
        log_level = argv[++i];
      } else if (a.rfind("--log-level=", 0) == 0) {
        log_level = a.substr(12);
      } else if (!a.empty() && a[0] == '-') {
        throw_user_error("unknown option '", a, "' before the command (see --help)");
      } else {
        break;
      }
    }
    init_logging(log_level);
    if (i >= argc) {
      std::cerr << kUsage;
      return kExitUserError;
    }
    const std::string command = argv[i];
    std::vector<std::string> args(argv + i + 1, argv + argc);
    // Global flags may also follow the command.
    for (auto it = args.begin(); it != args.end();) {
      if (*it == "-v" || *it == "--verbose") {
        spdlog::set_level(spdlog::level::debug);
        it = args.erase(it);
      } else {
        ++it;
      }
    }
    if (command == "inspect") return cmd_inspect(args);
    if (command == "verify") return cmd_verify(args);
    if (command == "plan") return cmd_plan(args);
    if (command == "keygen") return cmd_keygen(args);
    if (command == "codegen") return cmd_codegen(args);
    if (command == "tune") return cmd_tune(args);
    if (command == "serve") return cmd_serve(args);
    if (command == "status") return cmd_status(args);
    throw_user_error("unknown command '", command,
                     "' (commands: inspect, verify, plan, codegen, tune, keygen, serve, status; see --help)");
  });
}

}  // namespace dc::cli
