// The farm service's /metrics and status page (coordinator/service/metrics_text.h) and their
// HTTP server (metrics_http.h). End to end with a real service: tests/service/check_metrics.py.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "ir/error.h"
#include "metrics_http.h"
#include "metrics_text.h"

namespace dc {
namespace {

ServiceView sample_view() {
  ServiceView v;
  v.service_id = "host/1/2";
  ServiceView::Worker w;
  w.worker_id = "w<script>";
  w.host = "h\"1";
  w.gpu_types = {"h100", "h100"};
  w.state = "busy";
  w.leases = 1;
  v.workers.push_back(w);
  ServiceView::Device d;
  d.worker_id = w.worker_id;
  d.index = 1;
  d.gpu_type = "h100";
  d.busy_fraction = 0.25;
  v.devices.push_back(d);
  ServiceView::Tune t;
  t.id = 7;
  t.model = "m\"o\\d\nel<b>";
  t.submitted = 10;
  t.done = 4;
  t.eta_seconds = 3;
  v.tunes.push_back(t);
  v.queues.push_back({"h100", 5, 2, 2});
  v.results_by_status = {{"ok", 3}, {"compile_error", 1}};
  v.recorded_by_status = {{"ok", 3}};
  v.latency.bounds = {0.1, 1};
  v.latency.counts = {1, 2, 1};
  v.latency.count = 4;
  v.latency.sum = 5.5;
  return v;
}

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

TEST(FarmMetrics, PrometheusTextHasEveryFamilyWithEscapedLabels) {
  const std::string t = prometheus_text(sample_view());
  EXPECT_TRUE(has_line(t, "# TYPE dc_farm_workers gauge")) << t;
  EXPECT_TRUE(has_line(t, "dc_farm_workers{gpu_type=\"h100\",state=\"busy\"} 1")) << t;  // once per type
  EXPECT_TRUE(has_line(t, "dc_farm_workers{gpu_type=\"h100\",state=\"idle\"} 0")) << t;
  EXPECT_TRUE(has_line(t, "dc_farm_queue_depth{gpu_type=\"h100\"} 5")) << t;
  EXPECT_TRUE(has_line(t, "dc_farm_in_flight{gpu_type=\"h100\"} 2")) << t;
  EXPECT_TRUE(has_line(t, "dc_farm_results_total{status=\"compile_error\"} 1")) << t;
  EXPECT_TRUE(has_line(t, "dc_farm_recorded_total{status=\"ok\"} 3")) << t;
  // Cumulative buckets, +Inf the count.
  EXPECT_TRUE(has_line(t, "dc_farm_job_latency_seconds_bucket{le=\"0.1\"} 1")) << t;
  EXPECT_TRUE(has_line(t, "dc_farm_job_latency_seconds_bucket{le=\"1\"} 3")) << t;
  EXPECT_TRUE(has_line(t, "dc_farm_job_latency_seconds_bucket{le=\"+Inf\"} 4")) << t;
  EXPECT_TRUE(has_line(t, "dc_farm_job_latency_seconds_sum 5.5")) << t;
  // Label values: backslash, quote and newline escaped.
  EXPECT_TRUE(has_line(t, "dc_farm_tune_jobs{tune=\"7\",model=\"m\\\"o\\\\d\\nel<b>\",state=\"done\"} 4")) << t;
  EXPECT_TRUE(has_line(t, "dc_farm_tune_progress_ratio{tune=\"7\",model=\"m\\\"o\\\\d\\nel<b>\"} 0.4")) << t;
  EXPECT_TRUE(has_line(t, "dc_farm_device_busy_ratio{worker=\"w<script>\",device=\"1\",gpu_type=\"h100\"} 0.25")) << t;
}

TEST(FarmMetrics, StatusPageEscapesWhatClientsAndWorkersSent) {
  const std::string h = status_page_html(sample_view(), 7);
  EXPECT_NE(h.find("<meta http-equiv=refresh content=\"7\">"), std::string::npos);
  EXPECT_EQ(h.find("<script>"), std::string::npos) << h;
  EXPECT_NE(h.find("w&lt;script&gt;"), std::string::npos);
  EXPECT_NE(h.find("h&quot;1"), std::string::npos);
  EXPECT_NE(h.find("el&lt;b&gt;"), std::string::npos);
  EXPECT_EQ(h.find("el<b>"), std::string::npos);
  EXPECT_EQ(html_escape("a&<>\"'"), "a&amp;&lt;&gt;&quot;&#39;");
}

TEST(FarmMetrics, AddressesAreLoopbackUnlessNamed) {
  EXPECT_EQ(parse_metrics_address("9100").host, "127.0.0.1");
  EXPECT_TRUE(parse_metrics_address("9100").loopback());
  EXPECT_TRUE(parse_metrics_address("localhost:0").loopback());
  EXPECT_TRUE(parse_metrics_address("[::1]:9100").loopback());
  EXPECT_FALSE(parse_metrics_address("0.0.0.0:9100").loopback());
  EXPECT_EQ(parse_metrics_address("10.1.2.3:80").port, 80);
  EXPECT_THROW(parse_metrics_address("host.example:80"), UserError);
  EXPECT_THROW(parse_metrics_address("127.0.0.1:99999"), UserError);
  EXPECT_THROW(parse_metrics_address("127.0.0.1:"), UserError);
}

// One request on a fresh connection; the whole answer.
std::string http_exchange(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string got;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    (void)!::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return got;
}

TEST(FarmMetrics, HttpServerAnswersGetsAndRefusesTheRest) {
  MetricsHttpServer server(parse_metrics_address("127.0.0.1:0"));
  const std::string url = server.url();
  const int port = std::stoi(url.substr(url.rfind(':') + 1));
  server.publish("dc_farm_up 1\n", "<p>page</p>");
  const std::string m = http_exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(m.rfind("HTTP/1.1 200", 0), 0u) << m;
  EXPECT_NE(m.find("text/plain; version=0.0.4"), std::string::npos) << m;
  EXPECT_NE(m.find("\r\n\r\ndc_farm_up 1\n"), std::string::npos) << m;
  EXPECT_NE(http_exchange(port, "GET / HTTP/1.0\r\n\r\n").find("<p>page</p>"), std::string::npos);
  EXPECT_EQ(http_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nno colon\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_EQ(http_exchange(port, "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);  // no Host
  const std::string garbage = http_exchange(port, "GARBAGE\r\n\r\n");
  EXPECT_TRUE(garbage.empty() || garbage.rfind("HTTP/1.1 400", 0) == 0) << garbage;
  EXPECT_EQ(http_exchange(port, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nab")
                .rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_EQ(http_exchange(port, "GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  const std::string big = http_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nX: " + std::string(64 * 1024, 'a') + "\r\n\r\n");
  EXPECT_TRUE(big.empty() || big.rfind("HTTP/1.1 4", 0) == 0) << big.substr(0, 100);
  server.publish("dc_farm_up 2\n", "");
  EXPECT_NE(http_exchange(port, "GET /metrics HTTP/1.0\r\n\r\n").find("dc_farm_up 2\n"), std::string::npos);
}

}  // namespace
}  // namespace dc
