#include <cstdlib>
#include <iostream>
#include "testing.h"
#include "candidates.h"
#include "onnx/import.h"
#include "passes/simplify.h"

namespace dc {
TEST(CandidatesDump, Models) {
  const char* p = std::getenv("DUMP_MODEL");
  if (!p) GTEST_SKIP();
  Graph g = simplify(import_onnx_file(p));
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    std::cout << i << " " << g.nodes[i].op << " (";
    for (auto& in : g.nodes[i].inputs) std::cout << in << (g.is_constant(in) ? "[c]" : "") << " ";
    std::cout << ") -> " << g.nodes[i].outputs[0] << "\n";
  }
  auto c = generate_candidates(g);
  auto ws = dedupe_workloads(g, c);
  std::map<std::string, int> pats;
  for (size_t i = 0; i < c.size(); ++i) {
    pats[std::string(cluster_kind_name(c[i].kind)) + " " + c[i].pattern]++;
  }
  for (auto& [k, v] : pats) std::cout << v << "  " << k << "\n";
  std::cout << "nodes " << g.nodes.size() << " candidates " << c.size() << " workloads " << ws.workloads.size() << "\n";
  if (std::getenv("DUMP_CANON")) for (auto& w : ws.workloads) if (w.graph.nodes.size() > 2) std::cout << w.canonical << "\n";
}
}
