// Chrome-trace JSON and SVG timeline from per-task trace records.
#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kosmos/trace.h"

namespace kosmos::runtime {

const char* kind_colour(plan::TaskKind kind) {
  switch (kind) {
    case plan::TaskKind::kNop: return "#9e9e9e";
    case plan::TaskKind::kSpin: return "#7e57c2";
    case plan::TaskKind::kCopy: return "#ef6c00";      // communication / data movement: orange
    case plan::TaskKind::kChecksum: return "#fbc02d";
    case plan::TaskKind::kGemmTile: return "#1e88e5";  // compute: blue
    case plan::TaskKind::kReduceTile: return "#e53935";  // cross-rank reduction: red
    case plan::TaskKind::kMoeDispatch: return "#f57c00";
    case plan::TaskKind::kMoeCombine: return "#c62828";
    case plan::TaskKind::kMoeRoute:
    case plan::TaskKind::kMoeOffsets: return "#8d6e63";
    default: return "#43a047";
  }
}

namespace {
std::vector<TraceRecord> valid(const std::vector<TraceRecord>& records) {
  std::vector<TraceRecord> out;
  for (const auto& r : records)
    if (r.end_ns != 0 && r.end_ns >= r.start_ns) out.push_back(r);
  return out;
}
}  // namespace

std::string trace_to_chrome_json(const std::vector<TraceRecord>& records, const std::string& title) {
  auto rs = valid(records);
  uint64_t t0 = UINT64_MAX;
  for (const auto& r : rs) t0 = std::min(t0, r.start_ns);
  nlohmann::json events = nlohmann::json::array();
  std::map<uint32_t, bool> lanes;
  for (const auto& r : rs) {
    lanes[r.sm] = true;
    events.push_back({{"name", plan::to_string(plan::TaskKind(r.kind))},
                      {"cat", plan::to_string(plan::TaskKind(r.kind))},
                      {"ph", "X"},
                      {"pid", r.rank},
                      {"tid", r.sm},
                      {"ts", double(r.start_ns - t0) * 1e-3},
                      {"dur", double(r.end_ns - r.start_ns) * 1e-3},
                      {"args", {{"task", r.task_id}, {"cta", r.cta}, {"rank", r.rank}}}});
  }
  for (const auto& [sm, _] : lanes)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", sm}, {"args", {{"name", "SM " + std::to_string(sm)}}}});
  nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ns"}, {"otherData", {{"title", title}}}};
  return doc.dump(1);
}

std::string trace_to_svg(const std::vector<TraceRecord>& records, const std::string& title, int width_px) {
  auto rs = valid(records);
  uint64_t t0 = UINT64_MAX, t1 = 0;
  std::map<uint32_t, int> lane_of;
  std::map<uint16_t, bool> kinds;
  for (const auto& r : rs) {
    t0 = std::min(t0, r.start_ns);
    t1 = std::max(t1, r.end_ns);
    lane_of[r.sm] = 0;
    kinds[r.kind] = true;
  }
  int lane = 0;
  for (auto& [sm, l] : lane_of) l = lane++;
  const int lane_h = lane_of.size() > 64 ? 6 : 12, left = 60, top = 40;
  const int plot_w = width_px - left - 20;
  const int height = top + lane * lane_h + 60;
  const double span = rs.empty() ? 1.0 : double(std::max<uint64_t>(t1 - t0, 1));
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width_px << "\" height=\"" << height
     << "\" font-family=\"monospace\" font-size=\"11\">\n";
  os << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  os << "<text x=\"" << left << "\" y=\"16\" font-size=\"14\">" << title << " — " << rs.size() << " tasks, "
     << lane << " lanes (one per SM), " << span * 1e-3 << " us</text>\n";
  for (const auto& [sm, l] : lane_of) {
    os << "<g class=\"lane\" data-sm=\"" << sm << "\">";
    if (lane_h >= 10 || l % 8 == 0)
      os << "<text x=\"2\" y=\"" << top + l * lane_h + lane_h - 2 << "\" font-size=\"" << std::min(lane_h, 11) << "\">SM " << sm << "</text>";
    os << "<line x1=\"" << left << "\" x2=\"" << left + plot_w << "\" y1=\"" << top + (l + 1) * lane_h << "\" y2=\""
       << top + (l + 1) * lane_h << "\" stroke=\"#eee\"/></g>\n";
  }
  for (const auto& r : rs) {
    const double x = left + plot_w * double(r.start_ns - t0) / span;
    const double w = std::max(0.5, plot_w * double(r.end_ns - r.start_ns) / span);
    os << "<rect x=\"" << x << "\" y=\"" << top + lane_of[r.sm] * lane_h + 1 << "\" width=\"" << w << "\" height=\""
       << lane_h - 2 << "\" fill=\"" << kind_colour(plan::TaskKind(r.kind)) << "\"><title>task " << r.task_id << " "
       << plan::to_string(plan::TaskKind(r.kind)) << " rank " << r.rank << " " << double(r.end_ns - r.start_ns) * 1e-3
       << " us</title></rect>\n";
  }
  int lx = left;
  const int ly = top + lane * lane_h + 25;
  for (const auto& [k, _] : kinds) {
    os << "<rect x=\"" << lx << "\" y=\"" << ly - 10 << "\" width=\"12\" height=\"12\" fill=\""
       << kind_colour(plan::TaskKind(k)) << "\"/><text x=\"" << lx + 16 << "\" y=\"" << ly << "\">"
       << plan::to_string(plan::TaskKind(k)) << "</text>\n";
    lx += 120;
  }
  os << "<text x=\"" << left << "\" y=\"" << ly + 20 << "\">time →  0 .. " << span * 1e-3 << " us</text>\n";
  os << "</svg>\n";
  return os.str();
}

Status write_trace_files(const std::vector<TraceRecord>& records, const std::string& title, const std::string& json_path,
                         const std::string& svg_path) {
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    KOSMOS_CHECK(f.good(), "trace: cannot write '", json_path, "'");
    f << trace_to_chrome_json(records, title);
  }
  if (!svg_path.empty()) {
    std::ofstream f(svg_path);
    KOSMOS_CHECK(f.good(), "trace: cannot write '", svg_path, "'");
    f << trace_to_svg(records, title);
  }
  return Status::ok();
}

}  // namespace kosmos::runtime
