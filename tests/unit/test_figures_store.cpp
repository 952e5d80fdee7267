// The compile-everything runs' figures file (tests/compile_all/figures_store.h): what a run
// appends, the next run finds; a line cut short by a kill is ignored, not misread.
#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "../compile_all/figures_store.h"

namespace dc {
namespace {

std::string temp_file(const char* name) {
  const auto p = std::filesystem::temp_directory_path() /
                 (std::string(name) + "_" + std::to_string(::getpid()) + ".tsv");
  std::filesystem::remove(p);
  return p.string();
}

BatchItemResult result(bool ok, std::vector<std::array<int, 3>> kernels, std::string error = "") {
  BatchItemResult r;
  r.ok = ok;
  r.error = std::move(error);
  for (const auto& k : kernels) {
    KernelResources kr;
    kr.registers = k[0];
    kr.spill_stores_bytes = k[1];
    kr.spill_loads_bytes = k[2];
    r.kernels.push_back(kr);
  }
  return r;
}

TEST(FiguresStore, WhatOneRunAppendsTheNextFinds) {
  const std::string f = temp_file("figures_roundtrip");
  {
    FiguresStore s(f);
    s.append("0123456789abcdef", result(true, {{96, 0, 0}, {18, 0, 0}}));
    s.append("fedcba9876543210", result(true, {{72, 24, 28}}));
    s.append("00000000000000aa", result(false, {}, "kernel.cu(3): error: bad\tthing\nmore"));
  }
  FiguresStore s(f);
  EXPECT_EQ(s.size(), 3u);
  const auto a = s.find("0123456789abcdef");
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->ok);
  ASSERT_EQ(a->kernels.size(), 2u);
  EXPECT_EQ(a->kernels[0].registers, 96);
  EXPECT_EQ(a->kernels[1].registers, 18);
  const auto b = s.find("fedcba9876543210");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->kernels[0].registers, 72);
  EXPECT_EQ(b->kernels[0].spill_stores_bytes, 24);
  EXPECT_EQ(b->kernels[0].spill_loads_bytes, 28);
  const auto c = s.find("00000000000000aa");
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->ok);
  EXPECT_EQ(c->error, "kernel.cu(3): error: bad thing");  // first line, tabs made spaces
  EXPECT_FALSE(s.find("1111111111111111"));
  std::filesystem::remove(f);
}

TEST(FiguresStore, LinesCutShortAreIgnored) {
  const std::string f = temp_file("figures_cut");
  std::ofstream(f) << "0123456789abcdef\t1\t64:0:0\t\n"   // whole
                   << "fedcba9876543210\t1\t64:0:1"        // cut inside the figures
                   << "\n00000000000000bb\t1\t\t\n"          // ok without figures
                   << "short\t1\t64:0:0\t\n"                // not a key
                   << "00000000000000cc\t1\t64:0";          // cut, last line
  FiguresStore s(f);
  EXPECT_EQ(s.size(), 1u);
  EXPECT_TRUE(s.find("0123456789abcdef"));
  EXPECT_FALSE(s.find("fedcba9876543210"));
  EXPECT_FALSE(s.find("00000000000000bb"));
  EXPECT_FALSE(s.find("00000000000000cc"));
  std::filesystem::remove(f);
}

TEST(FiguresStore, NoPathKeepsNothing) {
  FiguresStore s("");
  EXPECT_FALSE(s.enabled());
  s.append("0123456789abcdef", result(true, {{32, 0, 0}}));
  EXPECT_EQ(s.size(), 0u);
  EXPECT_FALSE(s.find("0123456789abcdef"));
}

}  // namespace
}  // namespace dc
