// Trace export: the JSON parses as a Chrome trace; the SVG has one lane per SM.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "kosmos/trace.h"
#include "bench_timing.h"
#include "runtime/sample_pipeline.h"

using namespace kosmos;

TEST(Trace, ChromeJsonAndSvgFromACpuRun) {
  runtime::SampleResult r;
  ASSERT_TRUE(runtime::run_sample("cpu", 4, 8, 1024, 2000, 1, true, &r).is_ok());
  std::string js = runtime::trace_to_chrome_json(r.trace, "t");
  auto doc = nlohmann::json::parse(js);
  ASSERT_TRUE(doc.contains("traceEvents"));
  size_t complete = 0;
  std::set<uint32_t> lanes;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X") {
      ++complete;
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      lanes.insert(e["tid"].get<uint32_t>());
    }
  }
  EXPECT_EQ(complete, r.trace.size());
  std::set<uint32_t> sms;
  for (const auto& t : r.trace) sms.insert(t.sm);
  EXPECT_EQ(lanes, sms);

  std::string svg = runtime::trace_to_svg(r.trace, "t");
  std::regex lane_re("class=\"lane\" data-sm=\"(\\d+)\"");
  std::set<uint32_t> svg_lanes;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), lane_re); it != std::sregex_iterator(); ++it)
    svg_lanes.insert(uint32_t(std::stoul((*it)[1])));
  EXPECT_EQ(svg_lanes, sms);
  EXPECT_NE(svg.find(runtime::kind_colour(plan::TaskKind::kCopy)), std::string::npos);
  EXPECT_NE(svg.find(runtime::kind_colour(plan::TaskKind::kChecksum)), std::string::npos);
}

// The benches' per-label breakdown of a traced run: busy time, and the gaps before each label's
// tasks on their CTA (previous end to this start). Two CTAs: CTA 0 runs a (0-10 us), b (12-20),
// a (25-30); CTA 1 runs b (0-8), b (8-18). Gaps: b 2 us (CTA 0) + 0 (CTA 1), a 5 us; a CTA's first
// task has none. A record that did not run (end 0) is skipped.
TEST(Trace, BreakdownBusyAndGapsByLabel) {
  auto rec = [](uint32_t id, uint32_t cta, uint64_t s_us, uint64_t e_us) {
    return runtime::TraceRecord{id, 0, 0, cta, cta, s_us * 1000, e_us * 1000};
  };
  const std::vector<runtime::TraceRecord> r = {rec(0, 0, 0, 10), rec(2, 0, 25, 30), rec(1, 0, 12, 20),
                                               rec(3, 1, 0, 8),  rec(4, 1, 8, 18),  rec(5, 1, 0, 0)};
  const std::vector<std::string> labels = {"a", "b", "a", "b", "b", "a"};
  const std::string out = cli::trace_breakdown(r, labels, 2);
  // span 30 us on 2 SMs = 60 lane-us; busy 10+8+5+8+10 = 41 us; gaps 2+5 = 7 us.
  EXPECT_NE(out.find("span 30.0 us, tasks busy 68.3% of 2 SMs over it, gaps between a CTA's tasks 11.7%"), std::string::npos)
      << out;
  const std::regex a_line(R"(\n\s+a\s+2\s+0\.015\s+7\.50\s+10\.00\s+0\.0\s+30\.0\s+0\.005\s+5\.00\n)");
  const std::regex b_line(R"(\n\s+b\s+3\s+0\.026\s+8\.67\s+8\.00\s+0\.0\s+20\.0\s+0\.002\s+1\.00\n)");
  EXPECT_TRUE(std::regex_search(out, a_line)) << out;
  EXPECT_TRUE(std::regex_search(out, b_line)) << out;
  EXPECT_EQ(out.find("SM MHz"), std::string::npos) << "no cycles recorded: no clock column\n" << out;
}

// With cycles (the GPU executor's %clock64 over the task), the breakdown's last column is each
// label's SM clock: its tasks' cycles over their time. a: 10 us at 1.5 GHz + 5 us at 1.2 GHz ->
// 21,000 cycles / 15 us = 1400 MHz; b: 8 us at 2.0 GHz -> 2000 MHz.
TEST(Trace, BreakdownPrintsTheClockPerLabel) {
  auto rec = [](uint32_t id, uint32_t cta, uint64_t s_us, uint64_t e_us, uint64_t cycles) {
    runtime::TraceRecord r{id, 0, 0, cta, cta, s_us * 1000, e_us * 1000};
    r.cycles = cycles;
    return r;
  };
  const std::vector<runtime::TraceRecord> r = {rec(0, 0, 0, 10, 15000), rec(1, 0, 12, 17, 6000), rec(2, 1, 0, 8, 16000)};
  const std::vector<std::string> labels = {"a", "a", "b"};
  const std::string out = cli::trace_breakdown(r, labels, 2);
  EXPECT_NE(out.find("SM MHz"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\n\s+a\s+2\s.*\s1400\n)"))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\n\s+b\s+1\s.*\s2000\n)"))) << out;
}

// With each label's useful FLOPs, a last column gives them over the label's cycles as a share of
// the tensor peak per SM and clock: a has 21,000 cycles and half of 21,000 x 4096 FLOPs -> 50.0 %;
// b has no FLOPs (a copy): no value. Without cycles there is no such column.
TEST(Trace, BreakdownPrintsTheTensorPipesShare) {
  auto rec = [](uint32_t id, uint32_t cta, uint64_t s_us, uint64_t e_us, uint64_t cycles) {
    runtime::TraceRecord r{id, 0, 0, cta, cta, s_us * 1000, e_us * 1000};
    r.cycles = cycles;
    return r;
  };
  const std::vector<runtime::TraceRecord> r = {rec(0, 0, 0, 10, 15000), rec(1, 0, 12, 17, 6000),
                                               rec(2, 1, 0, 8, 16000)};
  const std::vector<std::string> labels = {"a", "a", "b"};
  const std::map<std::string, double> flops = {{"a", 0.5 * 21000 * cli::kTensorFlopsPerClock}};
  const std::string out = cli::trace_breakdown(r, labels, 2, &flops);
  EXPECT_NE(out.find("SM MHz  tensor %"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\n\s+a\s+2\s.*\s1400\s+50\.0\n)"))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\n\s+b\s+1\s.*\s2000\n)"))) << out;
  std::vector<runtime::TraceRecord> no_cycles = r;
  for (auto& x : no_cycles) x.cycles = 0;
  EXPECT_EQ(cli::trace_breakdown(no_cycles, labels, 2, &flops).find("tensor %"), std::string::npos);
}

// The CSV of a traced launch: one row per record that ran, times relative to the launch's first
// start, the label by task id ("?" past the labels), the header only when asked.
TEST(Trace, CsvRowsRelativeToTheLaunchStart) {
  auto rec = [](uint32_t id, uint32_t cta, uint64_t s_ns, uint64_t e_ns, uint64_t cycles) {
    runtime::TraceRecord r{id, 0, 0, cta + 10, cta, s_ns, e_ns};
    r.cycles = cycles;
    return r;
  };
  const std::vector<runtime::TraceRecord> r = {rec(1, 0, 5000, 7000, 3000), rec(0, 1, 4000, 4500, 900),
                                               rec(2, 1, 0, 0, 0), rec(7, 0, 8000, 9000, 1500)};
  const std::vector<std::string> labels = {"a", "b", "c"};
  EXPECT_EQ(cli::trace_csv(r, labels, 2, true),
            "launch,label,task,sm,cta,start_ns,end_ns,cycles\n"
            "2,b,1,10,0,1000,3000,3000\n"
            "2,a,0,11,1,0,500,900\n"
            "2,?,7,10,0,4000,5000,1500\n");
  EXPECT_EQ(cli::trace_csv(r, labels, 0, false).rfind("0,b,1,", 0), 0u);
}
