#include "metrics_http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <mutex>

#include <spdlog/spdlog.h>

#include "ir/error.h"

namespace dc {
namespace {

constexpr unsigned kConnectionTimeoutSeconds = 10;
constexpr unsigned kMaxConnections = 64;
constexpr unsigned kMaxConnectionsPerAddress = 16;
constexpr size_t kConnectionMemory = 16 * 1024;

// A listening socket closed by its destructor unless released.
struct Socket {
  int fd = -1;
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

}  // namespace

bool MetricsAddress::loopback() const {
  in_addr a4{};
  if (::inet_pton(AF_INET, host.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  in6_addr a6{};
  if (::inet_pton(AF_INET6, host.c_str(), &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
  return false;
}

MetricsAddress parse_metrics_address(const std::string& text) {
  MetricsAddress a;
  std::string port = text;
  a.host = "127.0.0.1";
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find("]:");
    DC_USER_CHECK(close != std::string::npos, "--metrics '", text, "': expected [IPv6]:PORT");
    a.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else if (const size_t colon = text.rfind(':'); colon != std::string::npos) {
    a.host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (a.host == "localhost") a.host = "127.0.0.1";
  DC_USER_CHECK(!port.empty() && port.size() <= 5 && port.find_first_not_of("0123456789") == std::string::npos,
                "--metrics '", text, "': the port must be a number (0 to 65535; 0 picks a free one)");
  a.port = std::stoi(port);
  DC_USER_CHECK(a.port <= 65535, "--metrics '", text, "': the port must be 0 to 65535");
  in_addr a4{};
  in6_addr a6{};
  DC_USER_CHECK(::inet_pton(AF_INET, a.host.c_str(), &a4) == 1 || ::inet_pton(AF_INET6, a.host.c_str(), &a6) == 1,
                "--metrics '", text, "': '", a.host, "' is not a numeric IPv4 or IPv6 address (or localhost)");
  return a;
}

struct MetricsHttpServer::Impl {
  MHD_Daemon* daemon = nullptr;
  std::string url;
  std::mutex mutex;
  std::string metrics = "# the farm service has not published its metrics yet\n";
  std::string html = "<!DOCTYPE html><title>dc farm service</title><p>starting";

  static MHD_Result answer(void* cls, MHD_Connection* connection, const char* url, const char* method,
                           const char* /*version*/, const char* /*upload_data*/, size_t* upload_data_size,
                           void** request_state) noexcept;
  MHD_Result respond(MHD_Connection* connection, unsigned status, const std::string& body, const char* type) noexcept;
};

MHD_Result MetricsHttpServer::Impl::respond(MHD_Connection* connection, unsigned status, const std::string& body,
                                            const char* type) noexcept {
  MHD_Response* r = MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (r == nullptr) return MHD_NO;  // out of memory: the library closes the connection
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
  MHD_add_response_header(r, "Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'");
  const MHD_Result ok = MHD_queue_response(connection, status, r);
  MHD_destroy_response(r);
  return ok;
}

MHD_Result MetricsHttpServer::Impl::answer(void* cls, MHD_Connection* connection, const char* url, const char* method,
                                           const char*, const char*, size_t* upload_data_size,
                                           void** request_state) noexcept {
  Impl& im = *static_cast<Impl*>(cls);
  static int first_call_marker;
  if (*request_state == nullptr) {
    // The headers are in; a body (which GET does not have) would come in later calls.
    *request_state = &first_call_marker;
    if (std::strcmp(method, MHD_HTTP_METHOD_GET) == 0 || std::strcmp(method, MHD_HTTP_METHOD_HEAD) == 0) {
      if (*upload_data_size == 0) return MHD_YES;
    }
  }
  *upload_data_size = 0;  // a body is read and ignored
  try {
    if (std::strcmp(method, MHD_HTTP_METHOD_GET) != 0 && std::strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
      return im.respond(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n", "text/plain; charset=utf-8");
    std::string body;
    const char* type = "text/plain; charset=utf-8";
    unsigned status = MHD_HTTP_OK;
    const std::string path = url;
    if (path == "/metrics") {
      std::lock_guard<std::mutex> lock(im.mutex);
      body = im.metrics;
      type = "text/plain; version=0.0.4; charset=utf-8";
    } else if (path == "/" || path == "/index.html") {
      std::lock_guard<std::mutex> lock(im.mutex);
      body = im.html;
      type = "text/html; charset=utf-8";
    } else {
      status = MHD_HTTP_NOT_FOUND;
      body = "not found: this service serves / and /metrics\n";
    }
    return im.respond(connection, status, body, type);
  } catch (...) {
    // std::bad_alloc copying a page: the connection is closed, the service goes on.
    return MHD_NO;
  }
}

MetricsHttpServer::MetricsHttpServer(const MetricsAddress& address) : impl_(std::make_unique<Impl>()) {
  in6_addr a6{};
  const bool v6 = ::inet_pton(AF_INET6, address.host.c_str(), &a6) == 1;
  Socket s;
  s.fd = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  DC_USER_CHECK(s.fd >= 0, "--metrics: cannot create a socket: ", std::strerror(errno));
  const int one = 1;
  ::setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (v6) {
    auto* sa = reinterpret_cast<sockaddr_in6*>(&ss);
    sa->sin6_family = AF_INET6;
    sa->sin6_port = htons(static_cast<uint16_t>(address.port));
    sa->sin6_addr = a6;
    len = sizeof *sa;
  } else {
    auto* sa = reinterpret_cast<sockaddr_in*>(&ss);
    sa->sin_family = AF_INET;
    sa->sin_port = htons(static_cast<uint16_t>(address.port));
    ::inet_pton(AF_INET, address.host.c_str(), &sa->sin_addr);
    len = sizeof *sa;
  }
  const std::string shown = v6 ? "[" + address.host + "]" : address.host;
  DC_USER_CHECK(::bind(s.fd, reinterpret_cast<sockaddr*>(&ss), len) == 0, "--metrics: cannot bind ", shown, ":",
                address.port, ": ", std::strerror(errno));
  DC_USER_CHECK(::listen(s.fd, 32) == 0, "--metrics: cannot listen on ", shown, ":", address.port, ": ",
                std::strerror(errno));
  socklen_t got = sizeof ss;
  ::getsockname(s.fd, reinterpret_cast<sockaddr*>(&ss), &got);
  const int port = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  impl_->url = "http://" + shown + ":" + std::to_string(port) + "/";
  const int fd = s.fd;
  impl_->daemon = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | (v6 ? MHD_USE_IPv6 : 0), 0, nullptr, nullptr, &Impl::answer,
      impl_.get(), MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_TIMEOUT, kConnectionTimeoutSeconds,
      MHD_OPTION_CONNECTION_LIMIT, kMaxConnections, MHD_OPTION_PER_IP_CONNECTION_LIMIT, kMaxConnectionsPerAddress,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, kConnectionMemory,
      // Strict: a header line without a colon, or an HTTP/1.1 request without Host, is 400.
      MHD_OPTION_STRICT_FOR_CLIENT, 1, MHD_OPTION_END);
  DC_USER_CHECK(impl_->daemon != nullptr, "--metrics: libmicrohttpd could not start on ", shown, ":", port);
  s.release();  // the daemon owns it now and closes it when stopped
}

MetricsHttpServer::~MetricsHttpServer() {
  if (impl_->daemon != nullptr) MHD_stop_daemon(impl_->daemon);
}

const std::string& MetricsHttpServer::url() const { return impl_->url; }

void MetricsHttpServer::publish(std::string metrics_text, std::string status_html) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->metrics = std::move(metrics_text);
  impl_->html = std::move(status_html);
}

}  // namespace dc
