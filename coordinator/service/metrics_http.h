// The HTTP side of `serve --metrics ADDR:PORT`: GET /metrics (Prometheus text) and GET /
// (the HTML status page), served by GNU libmicrohttpd on a thread of its own. The farm
// service's thread renders both documents (metrics_text.h) and publishes them here; the
// HTTP thread only copies the latest ones out, so it never touches the service's state.
// libmicrohttpd bounds what a client can make it do: a connection times out after 10 s
// idle, at most 64 connections (16 per address), 16 KiB of memory per connection
// (request line and headers); a malformed header or an HTTP/1.1 request without Host is
// answered 400 by the library (strict mode), and a request line it cannot read at all (no
// method and path) has its connection closed.
// Methods other than GET and HEAD get 405, other paths 404.
#pragma once

#include <memory>
#include <string>

namespace dc {

struct MetricsAddress {
  std::string host;  // numeric IPv4 or IPv6
  int port = 0;      // 0: a free one
  bool loopback() const;
};

// "PORT" (loopback: 127.0.0.1), "ADDR:PORT" or "[IPv6]:PORT"; "localhost" is 127.0.0.1.
// UserError for anything else.
MetricsAddress parse_metrics_address(const std::string& text);

class MetricsHttpServer {
 public:
  // Binds and starts serving (an empty page until the first publish). UserError when the
  // address cannot be bound.
  explicit MetricsHttpServer(const MetricsAddress& address);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // http://HOST:PORT/ with the bound port.
  const std::string& url() const;
  // Thread-safe: the documents GET /metrics and GET / answer from now on.
  void publish(std::string metrics_text, std::string status_html);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dc
