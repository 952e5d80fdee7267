#include "status_request.h"

#include <zmq.hpp>

#include "client_codec.h"
#include "farm_codec.h"

namespace dc {

farm::StatusReply request_status(const StatusRequestOptions& o) {
  zmq::context_t context;
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(farm::kDefaultMaxMessageBytes));
  if (!o.server_public_key.empty()) {
    socket.set(zmq::sockopt::curve_serverkey, o.server_public_key);
    socket.set(zmq::sockopt::curve_publickey, o.client_public_key);
    socket.set(zmq::sockopt::curve_secretkey, o.client_secret_key);
  }
  try {
    socket.connect(o.endpoint);
  } catch (const zmq::error_t& e) {
    throw_user_error("cannot connect to the farm service at ", o.endpoint, ": ", e.what());
  }
  farm::Envelope req = farm::make_envelope();
  req.mutable_status_request()->set_client_protocol_version(farm::kClientProtocolVersion);
  socket.send(zmq::buffer(farm::serialize(req)), zmq::send_flags::none);
  const auto deadline = std::chrono::steady_clock::now() + o.timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::vector<zmq::pollitem_t> items = {{socket.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, std::chrono::milliseconds(100));
    zmq::message_t msg;
    while (socket.recv(msg, zmq::recv_flags::dontwait)) {
      std::string why;
      const auto e = farm::parse_envelope(msg.data(), msg.size(), farm::kDefaultMaxMessageBytes, &why);
      if (!e) continue;
      if (e->body_case() == farm::Envelope::kRefused)
        throw_user_error("the farm service at ", o.endpoint, " refused: ", e->refused().reason());
      if (e->body_case() == farm::Envelope::kStatusReply) return e->status_reply();
    }
  }
  throw_user_error("no answer from a farm service at ", o.endpoint, " within ", o.timeout.count() / 1000.0,
                   " s (is `dc-coordinator serve` running there?)");
}

}  // namespace dc
