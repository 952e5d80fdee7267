#include "ir/host.h"

#include <unistd.h>

namespace dc {

std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

std::string host_and_pid() { return host_name() + "/" + std::to_string(::getpid()); }

}  // namespace dc
