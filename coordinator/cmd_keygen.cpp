// dc-coordinator keygen PATH [--force]: writes a CURVE key pair for the farm: PATH (public +
// secret, mode 0600) and PATH.pub (public only: what goes into the other side's allow-list
// or --coordinator-key). Used for both coordinators and workers (docs/farm.md, "Security").
#include <filesystem>
#include <iostream>

#include <boost/program_options.hpp>

#include "cli.h"
#include "farm_security.h"
#include "ir/error.h"

namespace dc::cli {

namespace po = boost::program_options;

int cmd_keygen(const std::vector<std::string>& args) {
  std::string path;
  bool force = false;
  po::options_description desc(
      "usage: dc-coordinator keygen PATH [--force]\n\n"
      "Writes a new CURVE key pair: PATH holds both keys (mode 0600), PATH.pub the public\n"
      "key. Give the coordinator's .pub to workers, and put workers' .pub lines in the\n"
      "coordinator's allow-list.\n\noptions");
  desc.add_options()("help,h", "this text")("force", po::bool_switch(&force),
                                            "overwrite existing key files");
  const auto parsed = parse_command(args, desc, &path);
  if (!parsed) return kExitOk;
  DC_USER_CHECK(!path.empty(), "keygen needs a path: dc-coordinator keygen keys/coordinator.key");
  const std::filesystem::path secret(path), pub(path + ".pub");
  DC_USER_CHECK(force || (!std::filesystem::exists(secret) && !std::filesystem::exists(pub)),
                "'", path, "' or its .pub exists already; use --force to overwrite");
  const farm::CurveKeyPair keys = farm::generate_curve_keypair();
  farm::write_curve_keypair(secret, keys);
  std::cout << "wrote " << secret.string() << " (secret, mode 0600) and " << pub.string()
            << "\npublic key: " << keys.public_key << "\n";
  return kExitOk;
}

}  // namespace dc::cli
