// One StatusRequest to a farm service and its StatusReply (`dc-coordinator status`).
#pragma once

#include <chrono>
#include <string>

#include "farm.pb.h"

namespace dc {

struct StatusRequestOptions {
  std::string endpoint;
  std::chrono::milliseconds timeout{5000};
  // CURVE: the service's public key and this client's key pair; all or none.
  std::string server_public_key, client_public_key, client_secret_key;
};

// UserError when the service refuses, or does not answer within the timeout.
farm::StatusReply request_status(const StatusRequestOptions& o);

}  // namespace dc
