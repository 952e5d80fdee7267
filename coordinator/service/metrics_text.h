// The farm service's Prometheus text exposition (version 0.0.4) and its HTML status page,
// both rendered from a ServiceView (service_view.h). Served by `serve --metrics` at /metrics
// and / (metrics_http.h). docs/farm.md, "Metrics and the status page".
#pragma once

#include <string>

#include "service_view.h"

namespace dc {

// Every metric is dc_farm_*: see docs/farm.md for the list. Label values are escaped as
// the format asks (backslash, double quote, newline).
std::string prometheus_text(const ServiceView& v);

// A read-only page that reloads itself every `refresh_seconds` (meta refresh). Every string
// from the service's state (worker ids, hosts, models: what clients and workers sent) is
// HTML-escaped.
std::string status_page_html(const ServiceView& v, int refresh_seconds);

// &, <, >, " and ' as entities.
std::string html_escape(const std::string& s);

}  // namespace dc
