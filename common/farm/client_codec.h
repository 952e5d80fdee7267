// The client protocol of the farm service (farm.proto, "client protocol"; docs/farm.md,
// "The farm as a service"): its version, which bodies belong to it, and the Measurement on
// the wire (Record) with the check of what comes off the network.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "farm.pb.h"
#include "farm/measurement.h"

namespace dc::farm {

// Version of the client protocol (ClientHello, StatusRequest). The Envelope's
// protocol_version stays the transport's (kProtocolVersion); this one changes when a client
// message changes meaning. 1: the first. 2: RatiosRequest/RatiosReply (a version 1 service
// would drop the request unanswered, so it refuses a version 2 client at its Hello instead).
// 3: Submits and Outcomes in batches (SubmitBatch, OutcomeBatch): a version 2 client would drop
// every OutcomeBatch as a body it does not know and wait for ever, so it is refused at its Hello.
inline constexpr uint32_t kClientProtocolVersion = 3;

// A SubmitBatch or OutcomeBatch is closed past this many bytes (well below the frame limit,
// kDefaultMaxMessageBytes), and the next one begins.
inline constexpr size_t kMaxClientBatchBytes = size_t{1} << 20;

// True for the bodies clients and the service exchange (client_hello .. status_reply).
bool is_client_body(const Envelope& e);

// The messages in order, except that each identity's Outcomes go in OutcomeBatches (client
// protocol 3), at most kMaxClientBatchBytes each: a batch takes the place of its first outcome,
// so it follows whatever was sent to that identity before it (a Welcome).
std::vector<std::pair<std::string, Envelope>> batch_outcomes(std::vector<std::pair<std::string, Envelope>> messages);

Record to_record(const Measurement& m);
// The Measurement of a Record; ProtocolError for an unknown status, non-finite or negative
// figures, or more than kMaxSamples samples.
Measurement from_record(const Record& r);

}  // namespace dc::farm
