// How dc's command-line tools parse one command's arguments with Boost.Program_options: the
// options of a description plus at most one positional argument. Header-only, like
// cli_guard.h, so that common/ does not link Boost.
#pragma once

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

namespace dc {

// Parses `args` with `desc`. With `positional`, one positional argument is stored there
// (through a hidden option named `positional_name`). nullopt when --help was asked for:
// `desc` is printed. Otherwise the notified variables (required options checked).
inline std::optional<boost::program_options::variables_map> parse_subcommand(
    const std::vector<std::string>& args, const boost::program_options::options_description& desc,
    const std::string& positional_name, std::string* positional) {
  namespace po = boost::program_options;
  po::options_description all;
  all.add(desc);
  po::positional_options_description pos;
  if (positional) {
    po::options_description hidden;
    hidden.add_options()(positional_name.c_str(), po::value(positional));
    all.add(hidden);
    pos.add(positional_name.c_str(), 1);
  }
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(all).positional(pos).run(), vm);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return std::nullopt;
  }
  po::notify(vm);
  return vm;
}

}  // namespace dc
