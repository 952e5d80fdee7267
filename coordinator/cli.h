// dc-coordinator's command line: `dc-coordinator COMMAND [options]`.
//
// Exit codes: 0 success; 1 the command ran but its check failed (verify mismatch);
// 2 bad input (usage, file, model); 3 internal error (a bug in dc: please report).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "gpu/gpu_spec.h"
#include "ir/graph.h"
#include "plan_estimate.h"

namespace dc::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;
inline constexpr int kExitUserError = 2;
inline constexpr int kExitInternalError = 3;

int run(int argc, char** argv);

// Subcommands; `args` excludes the program and command names.
int cmd_inspect(const std::vector<std::string>& args);
int cmd_verify(const std::vector<std::string>& args);
int cmd_plan(const std::vector<std::string>& args);
int cmd_codegen(const std::vector<std::string>& args);
int cmd_keygen(const std::vector<std::string>& args);
int cmd_tune(const std::vector<std::string>& args);
int cmd_serve(const std::vector<std::string>& args);
int cmd_status(const std::vector<std::string>& args);

// Parses a subcommand's arguments: `desc`'s options plus one positional MODEL into *model.
// Returns the parsed variables, or nullopt when --help was asked for (and printed).
std::optional<boost::program_options::variables_map> parse_command(
    const std::vector<std::string>& args, const boost::program_options::options_description& desc,
    std::string* model);

// --precision P (the plan's precision) and its deprecated spelling --precisions LIST.
void add_precision_options(boost::program_options::options_description& desc);
// Reads them into `opts` (over the config file's value) and checks that every GPU type has
// the tensor cores the precision needs (UserError otherwise).
void read_precision_options(const boost::program_options::variables_map& vm, PlanOptions* opts,
                            const std::vector<const GpuSpec*>& gpus);

// "--shape NAME=1x3x224x224" values -> map; UserError on malformed entries.
std::map<std::string, Shape> parse_shape_flags(const std::vector<std::string>& flags);

}  // namespace dc::cli
