// This machine's name, for the identities dc's processes give themselves (a worker, a
// tune's client, the farm service) and the host a tune records.
#pragma once

#include <string>

namespace dc {

// gethostname(), or "localhost" where it fails.
std::string host_name();

// "HOST/PID": a process on this machine (farm identities).
std::string host_and_pid();

}  // namespace dc
