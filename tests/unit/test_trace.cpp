// Trace export: the JSON parses as a Chrome trace; the SVG has one lane per SM.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "kosmos/trace.h"
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
