// The client protocol of the farm service (farm.proto, "client protocol"; docs/farm.md,
// "The farm as a service"): its version, which bodies belong to it, and the Measurement on
// the wire (Record) with the check of what comes off the network.
#pragma once

#include <string>

#include "farm.pb.h"
#include "farm/measurement.h"

namespace dc::farm {

// Version of the client protocol (ClientHello, StatusRequest). The Envelope's
// protocol_version stays the transport's (kProtocolVersion); this one changes when a client
// message changes meaning. 1: the first. 2: RatiosRequest/RatiosReply (a version 1 service
// would drop the request unanswered, so it refuses a version 2 client at its Hello instead).
inline constexpr uint32_t kClientProtocolVersion = 2;

// True for the bodies clients and the service exchange (client_hello .. status_reply).
bool is_client_body(const Envelope& e);

Record to_record(const Measurement& m);
// The Measurement of a Record; ProtocolError for an unknown status, non-finite or negative
// figures, or more than kMaxSamples samples.
Measurement from_record(const Record& r);

}  // namespace dc::farm
